
{{grants}}local KEYS, ARGV = KEYS, ARGV
local floor, ceil, sub = math.floor, math.ceil, string.sub
local P = ARGV[2]
local ei, burst, lim, hard, pend, nxt, seed, l0, lb, ld, lm, lq, fl0, fl1, st = struct.unpack('<ddddddddddddddd', P)
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = floor(now_us / 1000)
if now_ms < st then
  -- the snapshot's window has not begun by this clock (its writer's ran
  -- ahead): the limiter decides on the window before it
  return {5, 0}
end
local R = 120 + 2 * l0 -- where the rare strings start, less one
local pend0 = pend
local period, qf, ff
if now_ms >= pend then
  local o = R + lb + ld + lm
  period, pend, qf, ff, fl0 = 1, nxt, sub(P, o + 1, o + lq), sub(P, o + lq + 1, o + 2 * lq), fl1
else
  period, qf, ff = 0, sub(P, 121, 120 + l0), sub(P, 121 + l0, R)
end
local h = KEYS[1]
{{grant_name}}local hv = redis.call('HMGET', h, 'x', 'r', qf, ff{{grant_field}})
local usedS = hv[3]
if not usedS then
  -- the counter is missing: the general decision seeds or counts in g
  local o = R + lb + ld + lm
  local A = {ARGV[1], '0', '1', sub(P, R + 1, R + lb), '', '0', 2, sub(P, R + lb + 1, R + lb + ld),
    'r', 'rate', ei, burst, 'q', sub(P, R + lb + ld + 1, o), lim, hard, pend0, nxt,
    sub(P, 121, 120 + l0), sub(P, 121 + l0, R), sub(P, o + 1, o + lq), sub(P, o + lq + 1, o + 2 * lq), st}
  if seed == 1 then A[6] = '1' end
  if ARGV[3] then A[24] = '1' end
{{grant_flag}}{{decide_func}}
  return decide(KEYS, A)
end
if fl0 > 0 and tonumber(usedS) < fl0 then
  -- below what this process saw it hold: rolled back, or refunded; the
  -- limiter asks Postgres (rebaseLua) and decides again
  return {4, period}
end
{{fast_core}}
if ARGV[3] then
  r[7] = redis.call('GET', KEYS[2])
end
return r
