
local KEYS, ARGV = KEYS, ARGV
local floor, ceil, sub = math.floor, math.ceil, string.sub
local h = redis.call('HMGET', KEYS[1], 'v', 'pl', 'r', 'c', 'q:' .. ARGV[2], 'at', 'fq:' .. ARGV[2])
if not h[1] then return {3} end
{{confirm}}
local F = h[7]
local hv, usedS, qf, ff, period, pend, ei, burst, lim, hard, now_us, now_ms
if F then
  local nxt, l0, l1
  ei, burst, lim, hard, pend, nxt, l0, l1 = struct.unpack('<dddddddd', F)
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now_ms = floor(now_us / 1000)
  if now_ms >= pend then
    local o = 65 + 2 * l0
    period, pend, qf, ff = 1, nxt, sub(F, o, o + l1 - 1), sub(F, o + l1)
  else
    period, qf, ff = 0, sub(F, 65, 64 + l0), sub(F, 65 + l0, 64 + 2 * l0)
  end
  hv = redis.call('HMGET', KEYS[2], 'x', 'r', qf, ff)
  usedS = hv[3]
end
if not usedS then
  local ARGV = {ARGV[1], '0', '1', sub(KEYS[2], 1, -3), '', ARGV[3], ARGV[2], ARGV[4], '0', '0', '0'}
  local hw = redis.call('HGET', KEYS[1], 'w') -- a plan with windows has no fq:<meter>
{{decide_func}}{{ref_general}}
end
local h0 = h
local h = KEYS[2]
{{fast_core}}
for i = 1, 6 do r[#r + 1] = h0[i] end
return r
