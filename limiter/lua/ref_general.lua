{{confirm}}
local base = ARGV[4]
local K = {base .. 'st'}
local A = {ARGV[1], ARGV[2], ARGV[3], base, ARGV[5], ARGV[6], 0, ARGV[8]}
local n = 0
if h[3] then
  local ei, bu = string.match(h[3], '^(%S+) (%S+)')
  A[#A + 1] = 'r'; A[#A + 1] = 'rate'; A[#A + 1] = ei; A[#A + 1] = bu
  n = n + 1
end
if hw then
  -- the plan's windows: "<type> <name> <limit> <length ms>" each
  for ty, nm, lim, ms in string.gmatch(hw, '(%S+) (%S+) (%S+) (%S+)') do
    K[#K + 1] = base .. 'p' .. ty .. ':' .. nm .. ':' .. ms
    A[#A + 1] = ty; A[#A + 1] = nm; A[#A + 1] = lim; A[#A + 1] = ms
    n = n + 1
  end
end
if h[5] and ARGV[9] ~= '1' then
  local lim, hard, e, nx, s0, s1 = string.match(h[5], '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+)')
  local m = ARGV[7]
  local c0, c1 = m .. ':' .. s0, m .. ':' .. s1
  A[#A + 1] = 'q'; A[#A + 1] = m; A[#A + 1] = lim; A[#A + 1] = hard; A[#A + 1] = e; A[#A + 1] = nx
  A[#A + 1] = 'q:' .. c0; A[#A + 1] = 'f:' .. c0; A[#A + 1] = 'q:' .. c1; A[#A + 1] = 'f:' .. c1
  A[#A + 1] = 0 -- the window's start: a limits hash has none, the check is off
  n = n + 1
end
if h[4] and ARGV[10] == '1' then
  K[#K + 1] = base .. 'conc'
  A[#A + 1] = 'c'; A[#A + 1] = 'concurrency'; A[#A + 1] = h[4]; A[#A + 1] = ARGV[11]
  n = n + 1
end
A[7] = n
local r = decide(K, A)
for i = 1, 6 do r[#r + 1] = h[i] end
r[#r + 1] = hw or false
return r
