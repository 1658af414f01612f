
local cost = tonumber(ARGV[1])
local used = tonumber(usedS)
local fmt = string.format
local boff = ei * burst
local tat = tonumber(hv[2])
if tat == nil or tat < now_us then tat = now_us end
local clamped = false
if tat > now_us + boff then
  -- see decide(): a plan upgrade applies at once
  tat = now_us + boff
  clamped = true
end
local diff = now_us - (tat + cost * ei - boff)
local left = pend - now_ms
if left < 1000 then left = 1000 end
local x = tonumber(hv[1]) or 0
{{grant_pre}}local r
if diff >= 0 and not (hard == 1 and {{quota_over}}) then
  local ntat = floor(tat + cost * ei)
  local need = ceil(ntat / 1000)
  local e = pend + 604800000
  if e > need then need = e end
  if need > x then
    x = need + 86400000
    redis.call('HSET', h, 'r', fmt('%d', ntat), qf, fmt('%d', used + cost), 'x', x)
    redis.call('PEXPIREAT', h, x)
{{grant_draw}}  else
    -- formatted here: Redis turns a Lua number into a string with a
    -- shortest-round-trip dtoa, twice the instructions of a %d (both exact
    -- for these integers)
{{hset_plain}}  end
  if cost ~= 0 then
    local fS = hv[4]
    -- the counter turns unflushed (q = f before): mark it for the flush.
    -- Equal strings are equal numbers; other forms are compared as numbers.
    if usedS == fS or ((not fS or #fS ~= #usedS) and used == (tonumber(fS) or 0)) then
      local dq = $DIRTY .. 'q'
      redis.call('SADD', dq, $BASE .. 'qp:' .. sub(qf, 3))
      redis.call('EXPIRE', dq, 3456000)
    end
  end
  local rrem = floor((now_us - ntat + boff) / ei)
  if rrem < 0 then rrem = 0 end
  local rreset = ceil((ntat - now_us) / 1000)
  if rreset < 0 then rreset = 0 end
  local qrem = lim - used - cost
  if qrem < 0 then qrem = 0 end
{{grant_rem_ok}}  r = {-2 - 8 * period, 0, rrem, rreset, qrem, left}
else
  -- refused: nothing is taken; the rate's repair is still written
  local rrem = floor((now_us - tat + boff) / ei)
  local rreset = ceil((tat - now_us) / 1000)
  local idx, retry = 0, -1
  if diff < 0 then
    idx, retry = 1, ceil(-diff / 1000)
    rreset = retry
  end
{{quota_refuse}}  if clamped then
    local need = ceil(tat / 1000)
    if need > x then
      x = need + 86400000
      redis.call('HSET', h, 'r', tat, 'x', x)
      redis.call('PEXPIREAT', h, x)
    else
      redis.call('HSET', h, 'r', tat)
    end
  end
  local name = 'rate'
  if idx == 2 then name = $METER end
{{count_refusal}}
  count_refusal(now_ms, $BASE, $DIRTY, name)
  if rrem < 0 then rrem = 0 end
  if rreset < 0 then rreset = 0 end
  local qrem = lim - used
  if qrem < 0 then qrem = 0 end
{{grant_rem_no}}  r = {-1 - 2 * idx - 8 * period, retry, rrem, rreset, qrem, left}
end
