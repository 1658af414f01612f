-- grant_scan is grant_sum and grant_take (lua/grants.lua) in one pass, for
-- the common decision: the active grants' remaining, the ms until the
-- earliest pending one takes effect (false: none), and G with need units
-- drawn from the active grants in order (G itself when nothing is drawn).
-- One struct call per grant and no second walk; a draw from the first or
-- the second grant makes one string: the grants are stored last drawn
-- first, so struct's cN copies the head (the grants drawn after) into a
-- pack of the drawn remaining and, for the second, the first grant's
-- numbers. Each string and each struct call a decision makes costs Redis
-- about 1,000–1,500 instructions, more than the arithmetic. A draw is
-- made before the caller knows whether the grants cover it; a hard
-- quota's refusal (rare here: the limiter caches them) just drops it.
local function grant_scan(G, now_ms, need)
  local unpack, pack = struct.unpack, struct.pack
  local L = #G
  local av, pend, G1 = 0, false, G
  local e1, x1, r1 -- the first grant's numbers, for a draw from the second
  for o = L - 23, 1, -24 do
    local eff, exp, rem = unpack('<ddd', G, o)
    if exp == 0 or now_ms < exp then
      if now_ms >= eff then
        av = av + rem
        if need > 0 and rem > 0 then
          local t = rem
          if t > need then t = need end
          local v, hd = rem - t, o + 15
          if hd == L - 8 then
            -- the first grant: the field's tail
            if hd == 16 then G1 = pack('<c16d', G1, v)
            elseif hd == 40 then G1 = pack('<c40d', G1, v)
            elseif hd == 64 then G1 = pack('<c64d', G1, v)
            else G1 = pack('<c' .. hd .. 'd', G1, v) end
          elseif hd == L - 32 then
            -- the second: the first's numbers follow it
            if hd == 16 then G1 = pack('<c16dddd', G1, v, e1, x1, r1)
            elseif hd == 40 then G1 = pack('<c40dddd', G1, v, e1, x1, r1)
            else G1 = pack('<c' .. hd .. 'dddd', G1, v, e1, x1, r1) end
          else
            G1 = string.sub(G1, 1, hd) .. pack('<d', v) .. string.sub(G1, hd + 9)
          end
          rem = v
          need = need - t
        end
      elseif (exp == 0 or eff < exp) and (not pend or eff - now_ms < pend) then
        pend = eff - now_ms
      end
    end
    if o == L - 23 then e1, x1, r1 = eff, exp, rem end
  end
  return av, pend, G1
end
