package keyspace

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Grants: a tenant's prepaid units of a meter beside its included quota
// (Tollgate's credits). They live in the tenant's state hash (State), so
// that the decision script reads them in its own slot and round trip,
// with the HMGET it makes anyway:
//
//	G          the meters the tenant has grants of, "<meter> " each (the
//	           limiter reads it beside the snapshot: only those meters'
//	           decisions read grants, so a tenant without any pays nothing)
//	GN:<meter> the meter's grants' numbers: per grant its effective ms,
//	           expires ms (0 never) and remaining units as Redis decided
//	           them, little-endian doubles (24 bytes a grant), in the
//	           reverse of the draw order (priority, then earliest expiry,
//	           never-expiring last, then creation). The first drawn is
//	           the field's tail, so that a decision's draw from the first
//	           or second grant packs the field anew in one string
//	           (struct's cN copies the head): each string a decision
//	           makes costs Redis about 1,500 instructions. A closed grant
//	           (voided, expired) whose draws are not flushed yet stays
//	           with expires 1 (never drawn) until they are.
//	GI:<meter> the same grants' ids, "<id> " each, in the same order:
//	           written only by PutGrants, read only by what reports draws
//	           per grant (a reservation's decision, its settle, the
//	           flush's claim), never by a common decision.
//
// The layout before (one field G:<meter> with the ids after the numbers)
// is not read by decisions; PutGrants takes over its remainings (so that
// draws not flushed yet are not given again) and deletes it.
//	kf:<id>    a grant's flushed mark: its remaining when the last flush
//	           claimed its draws, so that what is drawn and not flushed is
//	           kf − remaining
//
// A grant is active from effective to expires by Redis's clock: a decision
// takes a request's cost from the included quota first, then from the
// active grants in order.

// GrantsField is the state hash field listing the meters with grants.
const GrantsField = "G"

// GrantsOf is the state hash field of a meter's grants' numbers.
func GrantsOf(meter string) string { return "GN:" + meter }

// GrantIDsOf is the state hash field of a meter's grants' ids.
func GrantIDsOf(meter string) string { return "GI:" + meter }

// GrantFlushed is the state hash field of a grant's flushed mark.
func GrantFlushed(id string) string { return "kf:" + id }

// Grant is one of a tenant's grants as Redis holds it.
type Grant struct {
	ID    string
	Meter string
	// EffectiveAt is when it can be drawn from; ExpiresAt when what is left
	// expires (zero: never).
	EffectiveAt time.Time
	ExpiresAt   time.Time
	// Remaining is, written, what Postgres holds that no flush has recorded
	// as drawn: what Redis is seeded with for a grant it does not have (a
	// new grant, or one Redis lost); a grant Redis has keeps Redis's
	// figure, which is ahead of Postgres by the draws not flushed yet.
	// Read (ParseGrants), it is Redis's.
	Remaining int64
	// Closed (read only) is a voided or expired grant kept for its
	// unflushed draws.
	Closed bool
}

// ErrGrantIDs is a grant id or meter that cannot be written.
var ErrGrantIDs = errors.New("keyspace: a grant id or meter holds a space, is empty, or is too long")

// ParseGrants reads a meter's GrantsOf and GrantIDsOf fields.
func ParseGrants(meter, nums, ids string) ([]Grant, error) {
	if len(nums)%24 != 0 {
		return nil, fmt.Errorf("keyspace: grants of %s: %d bytes", meter, len(nums))
	}
	n := len(nums) / 24
	idl := strings.Fields(ids)
	if len(idl) != n {
		return nil, fmt.Errorf("keyspace: grants of %s: %d ids for %d grants", meter, len(idl), n)
	}
	f := func(o int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64([]byte(nums[o : o+8]))) }
	out := make([]Grant, n)
	for i := range out {
		o := 24 * (n - 1 - i) // stored last drawn first
		g := Grant{ID: idl[i], Meter: meter, EffectiveAt: time.UnixMilli(int64(f(o))), Remaining: int64(f(o + 16))}
		switch exp := int64(f(o + 8)); exp {
		case 0:
		case 1:
			g.Closed = true
		default:
			g.ExpiresAt = time.UnixMilli(exp)
		}
		out[i] = g
	}
	return out, nil
}

// Grants reads the tenant's grants of meter as Redis holds them (closed
// ones included); nil when Redis has none.
func (k Keys) Grants(ctx context.Context, rdb redis.Cmdable, tenant, meter string) ([]Grant, error) {
	v, err := rdb.HMGet(ctx, k.State(tenant), GrantsOf(meter), GrantIDsOf(meter)).Result()
	if err != nil {
		return nil, fmt.Errorf("keyspace: grants of %q: %w", tenant, err)
	}
	nums, _ := v[0].(string)
	ids, _ := v[1].(string)
	if v[0] == nil {
		return nil, nil
	}
	gs, err := ParseGrants(meter, nums, ids)
	if err != nil {
		return nil, fmt.Errorf("keyspace: grants of %q: %w", tenant, err)
	}
	return gs, nil
}

func listable(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// grantsTTL is the expiry of a state hash that PutGrants creates: it
// holds no counter yet, and the first decision's rebuild reads Postgres
// anyway.
const grantsTTL = 8 * 24 * time.Hour

// putGrantsScript writes the grants, per meter, unless the state hash's
// epoch moved since the caller read it (a flush acknowledgement found its
// claim lost: Postgres's figures read before may lack that claim's draws,
// see the limiter's seedLua). A grant Redis has keeps its remaining; a new
// one gets Postgres's, with its flushed mark. Grants the new list drops
// stay (closed, expires 1) while they hold unflushed draws; flushed ones
// lose their mark. If that changed anything, the limits hash goes
// (decisions by reference do not draw grants: a tenant with grants is
// decided from its snapshot) and the tenant is announced, so that every
// near-cache reads it again; a write that changes nothing (the limiter's
// rebuild of a tenant without grants at every new period's first
// decision) announces nothing.
//
// KEYS: state hash, limits hash. ARGV: epoch, TTL ms of a new hash,
// channel, message, then per grant id, meter, effective ms, expires ms,
// remaining. Reply 1 written, -1 epoch moved.
var putGrantsScript = redis.NewScript(`
local h = KEYS[1]
local cur = redis.call('HMGET', h, 'e', 'G')
if (tonumber(cur[1]) or 0) ~= tonumber(ARGV[1]) then return -1 end
local old, oldOrder, oldMeters, oldG = {}, {}, {}, {}
if cur[2] then
  for m in string.gmatch(cur[2], '(%S+) ') do
    oldMeters[#oldMeters + 1] = m
    local v = redis.call('HMGET', h, 'GN:' .. m, 'GI:' .. m, 'G:' .. m)
    local N, I = v[1], v[2]
    oldG[m] = (N or '') .. '|' .. (I or '')
    if N and I then
      local o = #N - 7 -- the first drawn's remaining: stored last drawn first
      for id in string.gmatch(I, '(%S+) ') do
        old[id] = {m = m, rem = struct.unpack('<d', N, o)}
        oldOrder[#oldOrder + 1] = id
        o = o - 24
      end
    elseif v[3] then
      -- the layout before (G:<meter>: count, then effective, expires and
      -- remaining per grant, then the ids): its remainings carry over,
      -- draws not flushed yet included
      local G = v[3]
      local n = struct.unpack('<d', G)
      local i = 0
      for id in string.gmatch(string.sub(G, 9 + 24 * n), '(%S+) ') do
        local eff, exp, rem = struct.unpack('<ddd', G, 9 + 24 * i)
        old[id] = {m = m, rem = rem}
        oldOrder[#oldOrder + 1] = id
        i = i + 1
      end
    end
    if v[3] then redis.call('HDEL', h, 'G:' .. m) end
  end
end
local out, meters = {}, {}
local function add(m, id, eff, exp, rem)
  local o = out[m]
  if not o then
    o = {nums = {}, ids = {}}
    out[m] = o
    meters[#meters + 1] = m
  end
  table.insert(o.nums, 1, struct.pack('<ddd', eff, exp, rem)) -- last drawn first
  o.ids[#o.ids + 1] = id .. ' '
end
local seen = {}
for i = 5, #ARGV, 5 do
  local id, m, rem = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 4])
  seen[id] = true
  local o = old[id]
  if o then
    rem = o.rem
  else
    redis.call('HSET', h, 'kf:' .. id, ARGV[i + 4])
  end
  add(m, id, tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), rem)
end
for _, id in ipairs(oldOrder) do
  if not seen[id] then
    local o = old[id]
    local kf = tonumber(redis.call('HGET', h, 'kf:' .. id))
    if kf and kf ~= o.rem then
      add(o.m, id, 0, 1, o.rem)
    else
      redis.call('HDEL', h, 'kf:' .. id)
    end
  end
end
local idx = ''
local changed = false
for _, m in ipairs(meters) do
  local o = out[m]
  local N = table.concat(o.nums)
  local I = table.concat(o.ids)
  if N .. '|' .. I ~= oldG[m] then
    redis.call('HSET', h, 'GN:' .. m, N, 'GI:' .. m, I)
    changed = true
  end
  idx = idx .. m .. ' '
end
for _, m in ipairs(oldMeters) do
  if not out[m] then redis.call('HDEL', h, 'GN:' .. m, 'GI:' .. m) end
end
if idx ~= (cur[2] or '') then changed = true end
if not changed then
  -- nothing new (a rebuild of a tenant without grants, a sweep that
  -- found nothing to change): no near-cache needs to read it again
  return 1
end
if idx == '' then
  redis.call('HDEL', h, 'G')
else
  redis.call('HSET', h, 'G', idx)
end
if redis.call('PTTL', h) == -1 then redis.call('PEXPIRE', h, ARGV[2]) end
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// PutGrants writes the tenant's grants to Redis, as every writer of them
// must: Tollgate's server when a grant is created, voided or expires, and
// the limiter when it rebuilds grants Redis lost (Options.GrantLoader).
// load reads them (active and pending, every meter, in draw order, each
// with Postgres's remaining) after the state hash's epoch is read, and is
// called again when the epoch moved meanwhile (a concurrent flush's claim
// was lost and committed: what load read may lack it). Grants Redis
// already has keep Redis's remaining. The tenant's near-caches are told
// (an Invalidation of version -1) so that their next decisions draw the
// new grants.
func (k Keys) PutGrants(ctx context.Context, rdb redis.Cmdable, tenant string, load func(context.Context) ([]Grant, error)) error {
	for attempt := 0; ; attempt++ {
		epoch, err := rdb.HGet(ctx, k.State(tenant), "e").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("keyspace: grants of %q: epoch: %w", tenant, err)
		}
		grants, err := load(ctx)
		if err != nil {
			return fmt.Errorf("keyspace: grants of %q: %w", tenant, err)
		}
		written, err := k.PutGrantsAt(ctx, rdb, tenant, epoch, grants)
		if err != nil || written {
			return err
		}
		if attempt >= 4 {
			return fmt.Errorf("keyspace: grants of %q: the epoch keeps moving", tenant)
		}
	}
}

// PutGrantsAt is PutGrants with an epoch the caller read before it read
// grants (the limiter's rebuild has it from the seed reply). written is
// false when the epoch moved: read them again.
func (k Keys) PutGrantsAt(ctx context.Context, rdb redis.Cmdable, tenant string, epoch int64, grants []Grant) (written bool, err error) {
	args := make([]any, 0, 4+5*len(grants))
	args = append(args, epoch, grantsTTL.Milliseconds(), k.Invalidations(), Invalidation(tenant, -1))
	for _, g := range grants {
		if !listable(g.ID) || !listable(g.Meter) {
			return false, ErrGrantIDs
		}
		exp := int64(0)
		if !g.ExpiresAt.IsZero() {
			exp = max(g.ExpiresAt.UnixMilli(), 2) // 1 marks a closed grant
		}
		args = append(args, g.ID, g.Meter, g.EffectiveAt.UnixMilli(), exp, max(g.Remaining, 0))
	}
	n, err := putGrantsScript.Run(ctx, rdb, []string{k.State(tenant), k.Limits(tenant)}, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("keyspace: grants of %q: %w", tenant, err)
	}
	return n == 1, nil
}
