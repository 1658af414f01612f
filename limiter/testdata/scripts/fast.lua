
local KEYS, ARGV = KEYS, ARGV
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
local hv = redis.call('HMGET', h, 'x', 'r', qf, ff)
local usedS = hv[3]
if not usedS then
  -- the counter is missing: the general decision seeds or counts in g
  local o = R + lb + ld + lm
  local A = {ARGV[1], '0', '1', sub(P, R + 1, R + lb), '', '0', 2, sub(P, R + lb + 1, R + lb + ld),
    'r', 'rate', ei, burst, 'q', sub(P, R + lb + ld + 1, o), lim, hard, pend0, nxt,
    sub(P, 121, 120 + l0), sub(P, 121 + l0, R), sub(P, o + 1, o + lq), sub(P, o + lq + 1, o + 2 * lq), st}
  if seed == 1 then A[6] = '1' end
  if ARGV[3] then A[24] = '1' end

-- count_refusal adds one to the day's refusal count of policy name (the
-- refusal counts' hash <base>rf:<yyyymmdd>) and notes that hash for the
-- worker.
local function count_refusal(now_ms, base, dirty, name)
  local floor = math.floor
  local z = floor(now_ms / 86400000) + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  local rk = base .. 'rf:' .. (y * 10000 + m * 100 + d)
  if redis.call('HINCRBY', rk, name, 1) == 1 then
    redis.call('EXPIRE', rk, 3456000)
  end
  redis.call('ZINCRBY', dirty .. 'rf', 1, rk)
  redis.call('EXPIRE', dirty .. 'rf', 3456000)
end


local function decide(KEYS, ARGV)
local tonumber, floor, ceil = tonumber, math.floor, math.ceil
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = floor(now_us / 1000)
local cost = tonumber(ARGV[1])
local peek = ARGV[2] ~= '0'
local eff = cost
if peek then eff = tonumber(ARGV[2]) end
local n = tonumber(ARGV[7])
local seed = ARGV[6] == '1'
local h = KEYS[1]

-- Which fields of the hash this decision reads. Each policy's table is
-- made with every field it may get, so that it is never rehashed.
local st = {}
local early = false -- a quota's window has not begun by this clock
local fields = {'x'}
local nf = 1
local o = 8
local ki = 2
for i = 1, n do
  local typ = ARGV[o + 1]
  local s = {typ = typ, name = ARGV[o + 2], a = tonumber(ARGV[o + 3]), b = tonumber(ARGV[o + 4]), ok = true,
    rem = 0, reset = 0, retry = 0, period = 0, rem0 = 0, reset0 = false, fi = 0, key = false,
    tat = 0, ntat = 0, clamped = false, pend = 0, qf = false, ff = false, gf = false, hasg = false, used = 0, fl = 0, fresh = false,
    w = 0, cur = 0, prev = 0, g = false}
  if typ == 'r' then
    nf = nf + 1; fields[nf] = 'r'; s.fi = nf
    o = o + 4
  elseif typ == 'q' then
    local pend = tonumber(ARGV[o + 5])
    if now_ms >= pend then
      s.period = 1; s.pend = tonumber(ARGV[o + 6]); s.qf = ARGV[o + 9]; s.ff = ARGV[o + 10]
    else
      s.pend = pend; s.qf = ARGV[o + 7]; s.ff = ARGV[o + 8]
    end
    nf = nf + 1; fields[nf] = s.qf; s.fi = nf
    nf = nf + 1; fields[nf] = s.ff
    if now_ms < (tonumber(ARGV[o + 11]) or 0) then early = true end
    o = o + 11
  else
    s.key = KEYS[ki]; ki = ki + 1
    o = o + 4
  end
  st[i] = s
end
if early then
  -- the snapshot's writer's clock ran ahead: the limiter decides on the
  -- window before (see fastBody)
  return {5, 0}
end
local hv = fields
if nf > 1 then hv = redis.call('HMGET', h, unpack(fields)) else hv[1] = false end
local x = tonumber(hv[1]) or 0
local w = {}    -- field, value pairs for the hash's HSET
local nw = 0
local need = 0  -- the expiry (ms) the written fields need at least

-- a reservation's decision reports what it took of the included units
-- and of each grant (see reserve.go's settle)
local drawn = ARGV[o + 2] == '1' and ''
local refuse_idx = 0
local refuse_retry = -1
local needs = false
for i = 1, n do
  local s = st[i]
  local typ = s.typ
  local a, b = s.a, s.b
  if typ == 'r' then
    local ei = a
    local boff = ei * b
    local tat = tonumber(hv[s.fi])
    if tat == nil or tat < now_us then tat = now_us end
    -- Under one config tat never passes now + burst allowance; beyond it is
    -- debt run up at an older, slower rate. Clamp it so that a plan upgrade
    -- applies at once (an empty bucket refilling at the new rate). The
    -- repair is written even if this request is refused, or the old debt
    -- would be clamped afresh on every request and never shrink.
    if tat > now_us + boff then
      tat = now_us + boff
      s.clamped = true
    end
    local diff = now_us - (tat + eff * ei - boff)
    s.rem0 = floor((now_us - tat + boff) / ei)
    s.reset0 = ceil((tat - now_us) / 1000)
    s.tat = tat
    if diff < 0 then
      s.ok = false
      s.retry = ceil(-diff / 1000)
      s.reset = s.retry
      s.rem = s.rem0
    else
      local ntat = floor(tat + cost * ei)
      s.ntat = ntat
      s.rem = floor((now_us - ntat + boff) / ei)
      s.reset = ceil((ntat - now_us) / 1000)
    end
  elseif typ == 'q' then
    local used = tonumber(hv[s.fi])
    if not used then
      s.fresh = true
      if seed then
        needs = needs or {}
        needs[#needs + 1] = i
        needs[#needs + 1] = s.period
      end
      -- without a seed: what was counted while the counter was missing
      s.gf = 'g' .. string.sub(s.qf, 2)
      used = tonumber(redis.call('HGET', h, s.gf))
      s.hasg = used ~= nil
      used = used or 0
    end
    s.used = used
    s.fl = tonumber(hv[s.fi + 1]) or 0
    s.rem0 = a - used
    local left = s.pend - now_ms
    if left < 1000 then left = 1000 end
    s.reset = left
    local G = false
    if b >= 2 then
      -- the tenant has grants (hard + 2): drawn after the included quota
      b = b - 2; s.b = b
      G = redis.call('HGET', h, 'GN:' .. s.name)
    end
    if G then
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

      local av, gp = grant_sum(G, now_ms)
      local inc = a - used
      if inc < 0 then inc = 0 end
      local asked, taken = eff - inc, cost - inc -- beyond the included units
      if asked < 0 then asked = 0 end
      if taken < 0 then taken = 0 end
      if taken > av then taken = av end
      local ti = inc
      if ti > cost then ti = cost end
      s.g = {G = G, f = 'GN:' .. s.name, d = taken, take = grant_take, drawn = grant_drawn, inc = ti}
      s.rem0 = inc + av
      if b == 1 and asked > av then
        s.ok = false
        s.retry = left
        if gp and gp < left then s.retry = gp end
        if s.retry < 1 then s.retry = 1 end
        s.reset = s.retry
        s.rem = inc + av
      else
        s.rem = a - used - cost
        if s.rem < 0 then s.rem = 0 end
        s.rem = s.rem + av - taken
      end
    elseif b == 1 and used + eff > a then
      s.ok = false
      s.retry = left
      s.rem = a - used
    else
      s.rem = a - used - cost
    end
  elseif typ == 'c' then
    redis.call('ZREMRANGEBYSCORE', s.key, '-inf', now_ms)
    local held = redis.call('ZCARD', s.key)
    s.rem0 = a - held
    if held + 1 > a then
      s.ok = false
      s.retry = 1000
      s.reset = 1000
      s.rem = 0
    elseif peek then
      s.rem = a - held
    else
      s.rem = a - held - 1
    end
  elseif typ == 'w' then
    local idx = math.floor(now_ms / b)
    local wv = redis.call('HMGET', s.key, 'w', 'c', 'p')
    local wi = tonumber(wv[1]) or idx
    local cur = tonumber(wv[2]) or 0
    local prev = tonumber(wv[3]) or 0
    if wi == idx - 1 then
      prev = cur; cur = 0
    elseif wi < idx - 1 then
      prev = 0; cur = 0
    end
    local elapsed = now_ms - idx * b
    local est = prev * (1 - elapsed / b) + cur
    s.w = idx; s.cur = cur; s.prev = prev
    s.rem0 = math.floor(a - est)
    if est + eff > a then
      s.ok = false
      local wait
      if cur + eff <= a and prev > 0 then
        local f = 1 - (a - cur - eff) / prev
        wait = f * b - elapsed
      elseif eff <= a and cur > 0 then
        local f = 1 - (a - eff) / cur
        wait = (b - elapsed) + f * b
      else
        wait = (b - elapsed) + b
      end
      if wait < 1 then wait = 1 end
      s.retry = math.ceil(wait)
      s.reset = s.retry
      s.rem = math.floor(a - est)
    else
      s.rem = math.floor(a - est - cost)
      s.reset = b - elapsed
    end
  elseif typ == 'f' then
    -- a fixed window: the count since floor(now / length) · length, by
    -- Redis's clock; the key expires at the window's end
    local idx = floor(now_ms / b)
    local wv = redis.call('HMGET', s.key, 'w', 'c')
    local cur = 0
    if tonumber(wv[1]) == idx then cur = tonumber(wv[2]) or 0 end
    local left = (idx + 1) * b - now_ms
    s.w = idx; s.cur = cur
    s.rem0 = a - cur
    s.reset = left
    if cur + eff > a then
      s.ok = false
      s.retry = left
      -- a cost over the whole limit waits for no window: the next one's end
      if eff > a then s.retry = left + b end
      s.reset = s.retry
      s.rem = a - cur
    else
      s.rem = a - cur - cost
    end
  end
  if not s.ok and s.retry > refuse_retry then
    refuse_idx = i
    refuse_retry = s.retry
  end
end

if needs then
  local r = {2, #needs / 2, tonumber(redis.call('HGET', h, 'e')) or 0}
  for j = 1, #needs do r[#r + 1] = needs[j] end
  return r
end

if refuse_idx > 0 then
  for i = 1, n do
    local s = st[i]
    if s.clamped then
      w[nw + 1] = 'r'; w[nw + 2] = s.tat; nw = nw + 2
      local e = ceil(s.tat / 1000)
      if e > need then need = e end
    end
  end
  if ARGV[3] == '1' and not peek then
    count_refusal(now_ms, ARGV[4], ARGV[8], st[refuse_idx].name)
  end
else
  refuse_retry = 0
  if not peek then
    for i = 1, n do
      local s = st[i]
      if s.typ == 'r' then
        w[nw + 1] = 'r'; w[nw + 2] = s.ntat; nw = nw + 2
        local e = ceil(s.ntat / 1000)
        if e > need then need = e end
      elseif s.typ == 'q' then
        w[nw + 1] = s.qf; w[nw + 2] = s.used + cost; nw = nw + 2
        if s.fresh then
          w[nw + 1] = s.ff; w[nw + 2] = s.fl; nw = nw + 2
          if s.hasg then redis.call('HDEL', h, s.gf) end
        end
        if s.g then
          local G1 = s.g.G
          if s.g.d > 0 then
            G1 = s.g.take(G1, now_ms, s.g.d)
            w[nw + 1] = s.g.f; w[nw + 2] = G1; nw = nw + 2
          end
          if drawn then
            -- the ids only a reservation's report needs
            local I = redis.call('HGET', h, 'GI:' .. s.name)
            drawn = string.format('%d %d ', s.g.inc, s.a) .. s.g.drawn(s.g.G, G1, I)
          end
        end
        -- Kept until a week past the period's end, for the last flush.
        local e = s.pend + 604800000
        if e > need then need = e end
        if s.used == s.fl and cost ~= 0 then
          -- the counter turns unflushed: mark it for the worker's flush
          local dq = ARGV[8] .. 'q'
          redis.call('SADD', dq, ARGV[4] .. 'qp:' .. string.sub(s.qf, 3))
          redis.call('EXPIRE', dq, 3456000)
        end
      elseif s.typ == 'c' then
        redis.call('ZADD', s.key, now_ms + s.b, ARGV[5])
        redis.call('PEXPIRE', s.key, s.b)
      elseif s.typ == 'w' then
        redis.call('HSET', s.key, 'w', s.w, 'c', s.cur + cost, 'p', s.prev)
        redis.call('PEXPIRE', s.key, 2 * s.b)
      elseif s.typ == 'f' then
        redis.call('HSET', s.key, 'w', s.w, 'c', s.cur + cost)
        redis.call('PEXPIREAT', s.key, (s.w + 1) * s.b)
      end
    end
  end
end
if nw > 0 then
  if need > x then
    -- A day beyond what is needed, so that an active bucket moves its
    -- expiry about once a day, not on every decision.
    x = need + 86400000
    w[nw + 1] = 'x'; w[nw + 2] = x
    redis.call('HSET', h, unpack(w))
    redis.call('PEXPIREAT', h, x)
  else
    redis.call('HSET', h, unpack(w))
  end
end

local r = {0, refuse_idx, refuse_retry, now_ms}
if refuse_idx == 0 then r[1] = 1 end
local ri = 4
for i = 1, n do
  local s = st[i]
  local rem, reset = s.rem, s.reset
  if refuse_idx > 0 and s.ok then
    -- nothing was taken: report the policy as it stands
    rem = s.rem0
    if s.reset0 then reset = s.reset0 end
  end
  if rem < 0 then rem = 0 end
  if reset < 0 then reset = 0 end
  r[ri + 1] = rem; r[ri + 2] = reset; r[ri + 3] = s.period
  ri = ri + 3
end
if ARGV[o + 1] == '1' then
  -- the cached snapshot is past its safety TTL: send the stored one back
  r[#r + 1] = redis.call('GET', KEYS[#KEYS])
end
if drawn then r[#r + 1] = drawn end
return r
end

  return decide(KEYS, A)
end
if fl0 > 0 and tonumber(usedS) < fl0 then
  -- below what this process saw it hold: rolled back, or refunded; the
  -- limiter asks Postgres (rebaseLua) and decides again
  return {4, period}
end

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
local r
if diff >= 0 and not (hard == 1 and used + cost > lim) then
  local ntat = floor(tat + cost * ei)
  local need = ceil(ntat / 1000)
  local e = pend + 604800000
  if e > need then need = e end
  if need > x then
    x = need + 86400000
    redis.call('HSET', h, 'r', fmt('%d', ntat), qf, fmt('%d', used + cost), 'x', x)
    redis.call('PEXPIREAT', h, x)
  else
    -- formatted here: Redis turns a Lua number into a string with a
    -- shortest-round-trip dtoa, twice the instructions of a %d (both exact
    -- for these integers)
    redis.call('HSET', h, 'r', fmt('%d', ntat), qf, fmt('%d', used + cost))
  end
  if cost ~= 0 then
    local fS = hv[4]
    -- the counter turns unflushed (q = f before): mark it for the flush.
    -- Equal strings are equal numbers; other forms are compared as numbers.
    if usedS == fS or ((not fS or #fS ~= #usedS) and used == (tonumber(fS) or 0)) then
      local dq = sub(P, R + lb + 1, R + lb + ld) .. 'q'
      redis.call('SADD', dq, sub(P, R + 1, R + lb) .. 'qp:' .. sub(qf, 3))
      redis.call('EXPIRE', dq, 3456000)
    end
  end
  local rrem = floor((now_us - ntat + boff) / ei)
  if rrem < 0 then rrem = 0 end
  local rreset = ceil((ntat - now_us) / 1000)
  if rreset < 0 then rreset = 0 end
  local qrem = lim - used - cost
  if qrem < 0 then qrem = 0 end
  r = {-2 - 8 * period, 0, rrem, rreset, qrem, left}
else
  -- refused: nothing is taken; the rate's repair is still written
  local rrem = floor((now_us - tat + boff) / ei)
  local rreset = ceil((tat - now_us) / 1000)
  local idx, retry = 0, -1
  if diff < 0 then
    idx, retry = 1, ceil(-diff / 1000)
    rreset = retry
  end
  if hard == 1 and used + cost > lim and left > retry then
    idx, retry = 2, left
  end
  if clamped then
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
  if idx == 2 then name = sub(P, R + lb + ld + 1, R + lb + ld + lm) end

-- count_refusal adds one to the day's refusal count of policy name (the
-- refusal counts' hash <base>rf:<yyyymmdd>) and notes that hash for the
-- worker.
local function count_refusal(now_ms, base, dirty, name)
  local floor = math.floor
  local z = floor(now_ms / 86400000) + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local d = doy - floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  local rk = base .. 'rf:' .. (y * 10000 + m * 100 + d)
  if redis.call('HINCRBY', rk, name, 1) == 1 then
    redis.call('EXPIRE', rk, 3456000)
  end
  redis.call('ZINCRBY', dirty .. 'rf', 1, rk)
  redis.call('EXPIRE', dirty .. 'rf', 3456000)
end


  count_refusal(now_ms, sub(P, R + 1, R + lb), sub(P, R + lb + 1, R + lb + ld), name)
  if rrem < 0 then rrem = 0 end
  if rreset < 0 then rreset = 0 end
  local qrem = lim - used
  if qrem < 0 then qrem = 0 end
  r = {-1 - 2 * idx - 8 * period, retry, rrem, rreset, qrem, left}
end

if ARGV[3] then
  r[7] = redis.call('GET', KEYS[2])
end
return r
