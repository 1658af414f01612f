-- grant_drawn returns what each grant gave between G0 and G1 (the same
-- list before and after grant_take): "<id> <units> " per grant drawn, in
-- draw order.
local function grant_drawn(G0, G1)
  local n = struct.unpack('<d', G0)
  local out, j = '', 0
  for id in string.gmatch(string.sub(G0, 9 + 24 * n), '(%S+) ') do
    local o = 25 + 24 * j
    local d = struct.unpack('<d', G0, o) - struct.unpack('<d', G1, o)
    if d > 0 then out = out .. id .. ' ' .. string.format('%d', d) .. ' ' end
    j = j + 1
  end
  return out
end
