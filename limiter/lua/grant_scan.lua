-- grant_scan is grant_sum and grant_take (lua/grants.lua) in one pass, for
-- the common decision: the active grants' remaining, the ms until the
-- earliest pending one takes effect (false: none), and G with need units
-- drawn from the active grants in order (G itself when nothing is drawn).
-- One struct call per grant (the first reads the count too) and no second
-- walk: each costs Redis more than the arithmetic. A draw is made before
-- the caller knows whether the grants cover it; a hard quota's refusal
-- (rare here: the limiter caches them) just drops it.
local function grant_scan(G, now_ms, need)
  local unpack = struct.unpack
  local n, eff, exp, rem = unpack('<dddd', G)
  local av, pend, G1 = 0, false, G
  local o = 9
  for i = 1, n do
    if i > 1 then eff, exp, rem = unpack('<ddd', G, o) end
    if exp == 0 or now_ms < exp then
      if now_ms >= eff then
        av = av + rem
        if need > 0 and rem > 0 then
          local t = rem
          if t > need then t = need end
          -- a string made is what a decision costs most (its allocation
          -- and collection): struct's cN copies the head in the pack
          local hf = false
          if i == 1 then hf = '<c24d' elseif i == 2 then hf = '<c48d' elseif i == 3 then hf = '<c72d' end
          if hf then
            G1 = struct.pack(hf, G1, rem - t) .. string.sub(G1, o + 24)
          else
            G1 = string.sub(G1, 1, o + 15) .. struct.pack('<d', rem - t) .. string.sub(G1, o + 24)
          end
          need = need - t
        end
      elseif (exp == 0 or eff < exp) and (not pend or eff - now_ms < pend) then
        pend = eff - now_ms
      end
    end
    o = o + 24
  end
  return av, pend, G1
end
