package keyspace

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Grants: a tenant's prepaid units of a meter beside its included quota
// (Tollgate's credits). They live in the tenant's state hash (State), so
// that the decision script reads them in its own slot and round trip:
//
//	G          the grant list, "<id> <meter> <effective ms> <expires ms> "
//	           per grant (expires 0: never) in draw order: priority, then
//	           earliest expiry (never-expiring last), then creation. A
//	           closed grant (voided, expired) whose draws are not flushed yet
//	           stays listed with expires 1 (never drawn) until they are.
//	k:<id>     the grant's remaining units as Redis decided them
//	kf:<id>    its flushed mark: k when the last flush claimed its draws, so
//	           that what is drawn and not flushed is kf − k
//
// A grant is active from effective to expires by Redis's clock: a decision
// takes a request's cost from the included quota first, then from the
// active grants in the list's order. A listed grant whose k is missing is
// rebuilt (PutGrants) before it is drawn.

// GrantsField is the state hash field of the grant list.
const GrantsField = "G"

// GrantRemaining is the state hash field of a grant's remaining units.
func GrantRemaining(id string) string { return "k:" + id }

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
	// Remaining is what Postgres holds that no flush has recorded as drawn:
	// what Redis is seeded with when it has no k:<id> for the grant (a new
	// grant, or one Redis lost). A grant Redis has keeps Redis's figure,
	// which is ahead of Postgres by the draws not flushed yet.
	Remaining int64
}

// ErrGrantIDs is a grant id or meter that cannot be written in the list.
var ErrGrantIDs = errors.New("keyspace: a grant id or meter holds a space, is empty, or is too long")

// GrantList encodes grants as the G field holds them (in the order given).
func GrantList(grants []Grant) (string, error) {
	var b strings.Builder
	for _, g := range grants {
		if !listable(g.ID) || !listable(g.Meter) {
			return "", ErrGrantIDs
		}
		exp := int64(0)
		if !g.ExpiresAt.IsZero() {
			exp = max(g.ExpiresAt.UnixMilli(), 2) // 1 marks a closed grant
		}
		b.WriteString(g.ID)
		b.WriteByte(' ')
		b.WriteString(g.Meter)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(g.EffectiveAt.UnixMilli(), 10))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(exp, 10))
		b.WriteByte(' ')
	}
	return b.String(), nil
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

// putGrantsScript writes the grant list and seeds the grants Redis has no
// remaining for, unless the state hash's epoch moved since the caller read
// it (a flush acknowledgement found its claim lost: Postgres's figures
// read before may lack that claim's draws, see the limiter's seedLua).
// Listed grants dropped by the new list keep their place (closed, expires
// 1) while they hold unflushed draws; flushed ones lose their fields.
// Then the limits hash goes (decisions by reference do not draw grants:
// a tenant with grants is decided from its snapshot) and the tenant is
// announced, so that every near-cache reads it again.
//
// KEYS: state hash, limits hash. ARGV: epoch, list, TTL ms of a new hash,
// channel, message, then per listed grant its id and Postgres's remaining.
// Reply 1 written, -1 epoch moved.
var putGrantsScript = redis.NewScript(`
local h = KEYS[1]
local cur = redis.call('HMGET', h, 'e', 'G')
if (tonumber(cur[1]) or 0) ~= tonumber(ARGV[1]) then return -1 end
local list = ARGV[2]
local new = {}
for i = 6, #ARGV, 2 do new[ARGV[i]] = true end
if cur[2] then
  for id, m in string.gmatch(cur[2], '(%S+) (%S+) %S+ %S+ ') do
    if not new[id] then
      local r = redis.call('HMGET', h, 'k:' .. id, 'kf:' .. id)
      if r[1] and r[1] ~= r[2] then
        list = list .. id .. ' ' .. m .. ' 0 1 '
      else
        redis.call('HDEL', h, 'k:' .. id, 'kf:' .. id)
      end
    end
  end
end
for i = 6, #ARGV, 2 do
  local f = 'k:' .. ARGV[i]
  if redis.call('HEXISTS', h, f) == 0 then
    redis.call('HSET', h, f, ARGV[i + 1], 'kf:' .. ARGV[i], ARGV[i + 1])
  end
end
if list == '' then
  redis.call('HDEL', h, 'G')
else
  redis.call('HSET', h, 'G', list)
end
if redis.call('PTTL', h) == -1 then redis.call('PEXPIRE', h, ARGV[3]) end
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`)

// PutGrants writes the tenant's grants to Redis, as every writer of them
// must: Tollgate's server when a grant is created, voided or expires, and
// the limiter when it rebuilds grants Redis lost (Options.GrantLoader).
// load reads them (active and pending, in draw order, each with Postgres's
// remaining) after the state hash's epoch is read, and is called again
// when the epoch moved meanwhile (a concurrent flush's claim was lost and
// committed: what load read may lack it). Grants Redis already has keep
// Redis's remaining. The tenant's near-caches are told (an Invalidation
// of version -1) so that their next decisions draw the new list.
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
		n, err := k.putGrants(ctx, rdb, tenant, epoch, grants)
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
		if attempt >= 4 {
			return fmt.Errorf("keyspace: grants of %q: the epoch keeps moving", tenant)
		}
	}
}

// PutGrantsAt is PutGrants with an epoch the caller read before it read
// grants (the limiter's rebuild has it from the decision's reply). written
// is false when the epoch moved: read them again.
func (k Keys) PutGrantsAt(ctx context.Context, rdb redis.Cmdable, tenant string, epoch int64, grants []Grant) (written bool, err error) {
	n, err := k.putGrants(ctx, rdb, tenant, epoch, grants)
	return n == 1, err
}

func (k Keys) putGrants(ctx context.Context, rdb redis.Cmdable, tenant string, epoch int64, grants []Grant) (int64, error) {
	list, err := GrantList(grants)
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, 5+2*len(grants))
	args = append(args, epoch, list, grantsTTL.Milliseconds(), k.Invalidations(), Invalidation(tenant, -1))
	for _, g := range grants {
		args = append(args, g.ID, max(g.Remaining, 0))
	}
	n, err := putGrantsScript.Run(ctx, rdb, []string{k.State(tenant), k.Limits(tenant)}, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("keyspace: grants of %q: %w", tenant, err)
	}
	return n, nil
}
