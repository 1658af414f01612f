-- grant_drawn returns what each grant gave between G0 and G1 (the same
-- numbers before and after grant_take, I their ids in draw order):
-- "<id> <units> " per grant drawn, in draw order.
local function grant_drawn(G0, G1, I)
  local out, o = '', #G0 - 7 -- the first drawn's remaining
  for id in string.gmatch(I or '', '(%S+) ') do
    local d = struct.unpack('<d', G0, o) - struct.unpack('<d', G1, o)
    if d > 0 then out = out .. id .. ' ' .. string.format('%d', d) .. ' ' end
    o = o - 24
  end
  return out
end
