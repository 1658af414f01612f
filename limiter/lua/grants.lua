-- A meter's grants' numbers as the state hash holds them
-- (keyspace.GrantsOf): per grant its effective ms, expires ms (0 never)
-- and remaining units, little-endian doubles, 24 bytes, in the reverse of
-- the draw order (the first drawn is the field's tail, so that a draw
-- from it packs the field anew in one string); the ids, in draw order,
-- are a field of their own (keyspace.GrantIDsOf). grant_sum returns the
-- active ones' remaining by Redis's clock and the ms until the earliest
-- pending one takes effect (false: none).
local function grant_sum(G, now_ms)
  local av, pend = 0, false
  for o = #G - 23, 1, -24 do
    local eff, exp, rem = struct.unpack('<ddd', G, o)
    if exp == 0 or now_ms < exp then
      if now_ms >= eff then
        av = av + rem
      elseif (exp == 0 or eff < exp) and (not pend or eff - now_ms < pend) then
        pend = eff - now_ms
      end
    end
  end
  return av, pend
end
-- grant_take returns G with d units drawn from its active grants, in order.
local function grant_take(G, now_ms, d)
  for o = #G - 23, 1, -24 do
    if d <= 0 then break end
    local eff, exp, rem = struct.unpack('<ddd', G, o)
    if rem > 0 and now_ms >= eff and (exp == 0 or now_ms < exp) then
      local t = rem
      if t > d then t = d end
      G = string.sub(G, 1, o + 15) .. struct.pack('<d', rem - t) .. string.sub(G, o + 24)
      d = d - t
    end
  end
  return G
end
