package limiter

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// countRefusalBody defines count_refusal, shared by decideBody and fastBody.
const countRefusalBody = `
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

`

// decideBody checks and takes every policy of one decision, all or
// nothing. The only clock is Redis TIME.
//
// ARGV: 1 cost taken, 2 peek (0, or the cost asked about), 3 count refusals
// (0|1), 4 the tenant's key base ("<p>:{t:<tenant>}:"), 5 lease id, 6 seed
// required (0|1), 7 number of policies, 8 dirty marks' prefix
// (keyNames.dirtyBase), then per policy its type, name and:
//
//	r rate        ei (emission interval µs), burst               fields r, x of KEYS[1]
//	q quota       limit, hard(1)|soft(0), end ms, next end ms,   fields of KEYS[1]
//	              q and f field of the current period, of the next,
//	              the period's start ms (0: unknown; before it the
//	              reply is {5, 0}: decide on the window before)
//	c concurrency limit, lease TTL ms                            its own KEY (a sorted set)
//	w window      limit, length ms                               its own KEY (a hash)
//
// KEYS[1] is the hash holding the bucket and the period counters (the
// tenant's state hash, keyNames.state; for explicit Limits their bucket's
// hash): a decision reads it with one HMGET and writes it with one HSET,
// and sets its expiry only when a field needs it to live longer ("x"
// remembers what was set). What the flush has not moved yet is q − f,
// so no second counter is written per decision; the counter's mark goes
// into the dirty set only when it turns from flushed (q = f) to not.
//
// The dirty marks are the one key not in KEYS: in a Cluster their name
// carries a hash tag of the tenant's own slot, and on one node or a Ring
// they are written where the script runs, which is what the worker reads.
//
// One more ARGV after the policies asks for the tenant's stored snapshot,
// whose key is then the last KEY: it is appended to the reply (false when
// missing), so that the near-cache's safety re-read rides on the decision.
//
// Reply: {status, refusing index (1-based, 0 none), retry ms, now ms, then
// per policy: remaining, reset ms, period (quota: 0 current, 1 next)}.
// status 1 allowed, 0 refused, 2 needs seed: then the reply is
// {2, n, epoch, idx1, period1, ...} naming the quotas whose counter is
// missing, with the hash's epoch for the seed script.
const decideBody = countRefusalBody + `
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
    w = 0, cur = 0, prev = 0}
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
    if b == 1 and used + eff > a then
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
if #ARGV > o then
  -- the cached snapshot is past its safety TTL: send the stored one back
  r[#r + 1] = redis.call('GET', KEYS[#KEYS])
end
return r
end
`

// fastBody is decideBody's decision for the common plan, a token bucket
// and one quota, checked and taken at cost (no peek, no concurrency slot,
// not a lease take), in flat locals: per-policy tables, string work,
// number parsing and each ARGV (Redis makes an object of it and Lua
// interns it) are most of what the general decision costs Redis. It
// decides exactly as decide() does and hands the rare case to it (a
// counter missing: seeds and the counting while it is missing stay in one
// place).
//
// ARGV: 1 cost; 2 the plan, packed: little-endian doubles that one
// struct.unpack reads (tonumber on each would run strtod): emission
// interval µs, burst, quota limit, hard 1|0, period end ms, next period
// end ms, seed required 1|0, the length of the current period's q field,
// then the lengths of the first four strings that follow the current
// period's q and f fields: the tenant's key base, the dirty marks'
// prefix, the quota's name, the q and f fields of the next period (only
// rare paths read those), and the floors of the current and of the next
// period's counter (plan.floor, 0 none): a counter below its floor makes
// the reply {4, period}, and the limiter checks it against Postgres; and
// the window's start ms (0 when the window before it is unknown): Redis's
// time before it makes the reply {5}, and the limiter decides on the
// window before (Limiter.earlier), so a snapshot written by a clock that
// runs ahead never resets a quota early. One string instead of one ARGV each: Redis makes
// an object of every ARGV and Lua interns it, a few thousand instructions
// apiece. A 3rd ARGV reads the stored snapshot (KEYS[2]) back, as in
// decideLua. KEYS[1] the state hash. Reply: fastCore's, then the stored
// snapshot when it was asked for.
var fastBody = `
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
  period, pend, qf, ff, fl0 = 1, nxt, sub(P, o + 1, o + lq), sub(P, o + lq + 1), fl1
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
    sub(P, 121, 120 + l0), sub(P, 121 + l0, R), sub(P, o + 1, o + lq), sub(P, o + lq + 1), st}
  if seed == 1 then A[6] = '1' end
  if ARGV[3] then A[24] = '1' end
` + decideBody + `
  return decide(KEYS, A)
end
if fl0 > 0 and tonumber(usedS) < fl0 then
  -- below what this process saw it hold: rolled back, or refunded; the
  -- limiter asks Postgres (rebaseLua) and decides again
  return {4, period}
end
` + strings.NewReplacer(
	"$BASE", "sub(P, R + 1, R + lb)",
	"$DIRTY", "sub(P, R + lb + 1, R + lb + ld)",
	"$METER", "sub(P, R + lb + ld + 1, R + lb + ld + lm)",
).Replace(fastCore) + `
if ARGV[3] then
  r[7] = redis.call('GET', KEYS[2])
end
return r
`

// fastCore is the common plan's decision once the state hash is read
// (hv: x, r, the counter and its flushed mark; usedS the counter, not
// missing), shared by fastBody and fastRefBody: $BASE, $DIRTY and $METER
// stand for the tenant's key base, the dirty marks' prefix and the
// quota's name, which each reads from its own arguments (only the rare
// paths use them). It leaves the reply in r, shorter than decideLua's
// (each element of a reply costs Redis about a thousand instructions):
// {-(1 + allowed + 2 × refusing index + 8 × quota period), retry ms,
// rate remaining, rate reset ms, quota remaining, quota reset ms}. The
// first element is negative, which tells it from decideLua's reply.
const fastCore = `
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
  if idx == 2 then name = $METER end
` + countRefusalBody + `
  count_refusal(now_ms, $BASE, $DIRTY, name)
  if rrem < 0 then rrem = 0 end
  if rreset < 0 then rreset = 0 end
  local qrem = lim - used
  if qrem < 0 then qrem = 0 end
  r = {-1 - 2 * idx - 8 * period, retry, rrem, rreset, qrem, left}
end
`

// fastLua defines decide() and count_refusal only on the paths that call
// them: a closure made on every call is a cost too.
var fastLua = fastBody

const decideLua = decideBody + `
return decide(KEYS, ARGV)
`

// seedLua rebuilds a missing period counter from the durable usage the
// UsageLoader read: q = durable + what was counted while it was missing
// (g), with the flushed mark at durable (so the flush moves g next).
//
// It runs only if the hash's epoch is still the one the decision saw
// before the Postgres read: a flush acknowledgement that finds its claim
// lost (Redis lost the hash while the worker held the claim) moves the
// epoch, because its units are in Postgres and a durable figure read
// before its commit lacks them. The seed then answers -1 and the limiter
// reads Postgres again; a counter seeded before such an acknowledgement is
// deleted by it (its growth kept in g) and rebuilt. A claim still in the
// hash (only a counter deleted on its own leaves one) is dropped for the
// same reason: its acknowledgement then finds it lost and has the counter
// rebuilt after its commit. So every committed claim is in the rebuilt
// counter exactly once (TestSeedRacingFlush).
//
// KEYS: state hash. ARGV: counter suffix, durable, expire-at ms, epoch,
// mark, dirty set. Reply: 1 seeded, 0 already there, -1 epoch moved.
const seedLua = `
local sfx = ARGV[1]
local r = redis.call('HMGET', KEYS[1], 'q:' .. sfx, 'e', 'g:' .. sfx, 'x')
if r[1] then return 0 end
if (tonumber(r[2]) or 0) ~= tonumber(ARGV[4]) then return -1 end
local d = tonumber(ARGV[2])
local g = tonumber(r[3]) or 0
redis.call('HSET', KEYS[1], 'q:' .. sfx, d + g, 'f:' .. sfx, d)
redis.call('HDEL', KEYS[1], 'ci:' .. sfx, 'cn:' .. sfx, 'g:' .. sfx, 'cs:' .. sfx)
if g ~= 0 then
  redis.call('SADD', ARGV[6], ARGV[5])
  redis.call('EXPIRE', ARGV[6], 3456000)
end
local e = tonumber(ARGV[3])
if e > (tonumber(r[4]) or 0) then
  redis.call('HSET', KEYS[1], 'x', e)
  redis.call('PEXPIREAT', KEYS[1], e)
end
return 1
`

// rebaseLua repairs a counter that a decision found below its floor (what
// this process saw it hold), with the durable usage the UsageLoader read:
// if the counter is below that too, Redis went back (a replica promoted
// after losing its master's last writes: Postgres has the old master's
// flushed units, and more), so the counter becomes the durable usage,
// with nothing unflushed (what it held unflushed was the old master's,
// flushed from there), its claim and flush sequence dropped (its next
// claim is counted as the rebuild's are) and the epoch moved (a flush
// acknowledging a claim made before the rebase then has it rebuilt from
// Postgres once more). Otherwise it was a refund: nothing is written.
//
// KEYS: state hash. ARGV: counter suffix, durable, floor. Reply: 1
// rebased, 0 left.
const rebaseLua = `
local sfx = ARGV[1]
local q = tonumber(redis.call('HGET', KEYS[1], 'q:' .. sfx))
local d = tonumber(ARGV[2])
if not q or q >= tonumber(ARGV[3]) or q >= d then return 0 end
redis.call('HSET', KEYS[1], 'q:' .. sfx, d, 'f:' .. sfx, d)
redis.call('HDEL', KEYS[1], 'ci:' .. sfx, 'cn:' .. sfx, 'cs:' .. sfx)
redis.call('HINCRBY', KEYS[1], 'e', 1)
return 1
`

var (
	rebaseScript  = redis.NewScript(rebaseLua)
	decideScript  = redis.NewScript(decideLua)
	fastScript    = redis.NewScript(fastLua)
	refScript     = redis.NewScript(refLua)
	fastRefScript = redis.NewScript(fastRefBody)
	putLimScript  = redis.NewScript(putLimLua)
	seedScript    = redis.NewScript(seedLua)
)

// toInt64 reads an integer reply element without panicking on a surprise.
func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	default:
		return 0, fmt.Errorf("limiter: unexpected script reply element %T", v)
	}
}

// refLua decides by reference: for a tenant missing from the near-cache,
// the script reads the limits it needs from the tenant's limits hash
// (keyNames.limits, written by the limiter whenever it reads a snapshot)
// and builds the decision's keys and arguments itself, so that the
// decision is still one round trip. The limits hash is deleted by the
// server when it writes or deletes the snapshot.
//
// KEYS[1] limits hash. ARGV: 1-3 as decideLua's, 4 the tenant's key base
// ("<p>:{t:<tenant>}:"), 5 lease id, 6 seed required, 7 meter, 8 dirty
// marks' prefix, 9 skip quota (0|1), 10 concurrency slot wanted (0|1),
// 11 lease TTL ms, and optionally 12 a version and 13 a time (ms): the
// hash's "at" becomes that time if it still holds that version (the
// Loader confirmed it; see recheckInBackground).
//
// Reply: {3} when there is no limits hash; else decideLua's reply followed
// by the hash's v, pl, r, c, q:<meter>, at fields (false when missing).
//
// Hash fields: v version, pl plan, at written (ms), r "<emission interval
// µs> <burst> <per second>", c concurrency, q:<meter> "<limit> <hard 1|0>
// <end ms> <next end ms> <start unix> <end unix> <mode>".
var refLua = decideBody + `
local h = redis.call('HMGET', KEYS[1], 'v', 'pl', 'r', 'c', 'q:' .. ARGV[7], 'at')
if not h[1] then return {3} end
` + refGeneral

// refGeneral is refLua's decision once the limits hash's fields are read
// (h: v, pl, r, c, q:<meter>, at), shared with fastRefBody's rare paths.
// decide() must be defined.
var refGeneral = confirmLua("ARGV[12]", "ARGV[13]") + `
local base = ARGV[4]
local K = {base .. 'st'}
local A = {ARGV[1], ARGV[2], ARGV[3], base, ARGV[5], ARGV[6], 0, ARGV[8]}
local n = 0
if h[3] then
  local ei, bu = string.match(h[3], '^(%S+) (%S+)')
  A[#A + 1] = 'r'; A[#A + 1] = 'rate'; A[#A + 1] = ei; A[#A + 1] = bu
  n = n + 1
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
return r
`

// confirmLua writes a Loader's confirmation into the limits hash (KEYS[1],
// read into h): its "at" becomes the time at if it still holds version
// (see recheckInBackground). version and at name the ARGV that carry them.
func confirmLua(version, at string) string {
	return `
if ` + at + ` and h[1] == ` + version + ` then
  -- the Loader confirmed this version: young again
  redis.call('HSET', KEYS[1], 'at', ` + at + `)
  h[6] = ` + at + `
end`
}

// fastRefBody is refLua for the common request by reference (a token
// bucket and the request's quota, at cost: no peek, no concurrency slot,
// the quota not skipped): the limiter writes the limits hash with a field
// fq:<meter> holding what fastBody gets as arguments (limitsFields), so
// that a tenant missing from the near-cache costs Redis about what a
// cached one does, not the general decision's table and string work. A
// hash without that field (written by an older limiter, or a plan with no
// rate) and a missing counter go the general way (refGeneral).
//
// KEYS[1] limits hash, KEYS[2] state hash. ARGV (only what the common
// request needs; the rare paths make refLua's from them): 1 cost, 2 the
// meter, 3 seed required (0|1), 4 the dirty marks' prefix, and optionally
// 5 a version and 6 a time (ms), as refLua's 12 and 13; the tenant's key
// base is KEYS[2] less "st" (an ARGV costs Redis more than the rare paths'
// string.sub). fq:<meter>:
// little-endian doubles emission interval µs, burst, limit, hard 1|0,
// period end ms, next period end ms, the lengths of the current and of
// the next period's q field, then the q and f fields of the current
// period and of the next. Reply: {3} without a limits hash; else
// fastCore's reply (or, on the rare paths, decideLua's) followed by the
// hash's v, pl, r, c, q:<meter>, at fields, as refLua's.
var fastRefBody = `
local KEYS, ARGV = KEYS, ARGV
local floor, ceil, sub = math.floor, math.ceil, string.sub
local h = redis.call('HMGET', KEYS[1], 'v', 'pl', 'r', 'c', 'q:' .. ARGV[2], 'at', 'fq:' .. ARGV[2])
if not h[1] then return {3} end
` + confirmLua("ARGV[5]", "ARGV[6]") + `
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
` + decideBody + refGeneral + `
end
local h0 = h
local h = KEYS[2]
` + strings.NewReplacer(
	"$BASE", "sub(KEYS[2], 1, -3)",
	"$DIRTY", "ARGV[4]",
	"$METER", "ARGV[2]",
).Replace(fastCore) + `
for i = 1, 6 do r[#r + 1] = h0[i] end
return r
`

// putLimLua writes a tenant's limits hash unless a newer version is
// stored, or a snapshot of another version is (the server wrote it
// meanwhile, and deleted the hash: a late write must not bring the old
// limits back). KEYS[1] limits hash, KEYS[2] snapshot; ARGV: version,
// TTL s, then field, value...
const putLimLua = `
local v = tonumber(redis.call('HGET', KEYS[1], 'v'))
if v and v > tonumber(ARGV[1]) then return 0 end
local raw = redis.call('GET', KEYS[2])
if raw then
  local ok, obj = pcall(cjson.decode, raw)
  if ok and type(obj) == 'table' and tonumber(obj['version']) ~= tonumber(ARGV[1]) then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
`
