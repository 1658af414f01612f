// Package limitstore is the server side of the limiter's Redis state: what
// Tollgate's api and worker use to publish entitlement snapshots, to read
// and flush the quota counters the limiter counts, and to read refusal
// counts. It lives outside the public limiter package because SaaS backends
// never need it; the key layout it writes is the one the limiter reads (a
// test of this package keeps the two in step).
package limitstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
)

// Store publishes snapshots and flushes quota counters.
type Store struct {
	rdb  redis.UniversalClient
	keys Keys
	// SnapshotTTL is how long a written snapshot lives without being written
	// again; default 7 days. The Loader brings back an expired one.
	SnapshotTTL time.Duration
}

// New returns a Store on rdb with the key prefix ("" = "tg").
func New(rdb redis.UniversalClient, prefix string) *Store {
	_, cluster := rdb.(*redis.ClusterClient)
	return &Store{rdb: rdb, keys: Keys{Prefix: prefix, Cluster: cluster}, SnapshotTTL: 7 * 24 * time.Hour}
}

// Keys returns the key names the Store uses.
func (s *Store) Keys() Keys { return s.keys }

// putSnapshotLua writes a snapshot unless a newer version is stored (writes
// may arrive out of order), and announces it.
var putSnapshotScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, obj = pcall(cjson.decode, cur)
  if ok and type(obj) == 'table' and tonumber(obj['version']) and tonumber(obj['version']) > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('DEL', KEYS[2]) -- the limits hash: the next limiter to read the snapshot writes it
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`)

// republishScript refreshes a stored snapshot's TTL when it is the same,
// writes and announces it when it differs (missing, older, or the same
// version computed differently), and leaves a newer one alone.
var republishScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return 0
end
if cur then
  local ok, obj = pcall(cjson.decode, cur)
  if ok and type(obj) == 'table' and tonumber(obj['version']) and tonumber(obj['version']) > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('DEL', KEYS[2]) -- the limits hash, as in putSnapshotScript
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`)

var deleteSnapshotScript = redis.NewScript(`
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
`)

// PutSnapshot writes the tenant's snapshot (JSON, with SnapshotTTL) and
// publishes "<tenant>:<version>" on Keys.Invalidations(), in one script. A
// write older than the stored version is ignored (not an error).
func (s *Store) PutSnapshot(ctx context.Context, snap limiter.Snapshot) error {
	if !validName(snap.TenantID) {
		return fmt.Errorf("%w: snapshot tenant id %q", limiter.ErrInvalidRequest, snap.TenantID)
	}
	raw, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("limitstore: encoding snapshot: %w", err)
	}
	ttl := int64(s.SnapshotTTL / time.Second)
	if ttl < 1 {
		ttl = 1
	}
	err = putSnapshotScript.Run(ctx, s.rdb, []string{s.keys.Snapshot(snap.TenantID), s.keys.Limits(snap.TenantID)},
		raw, snap.Version, ttl, s.keys.Invalidations(), snap.TenantID+":"+strconv.FormatInt(snap.Version, 10)).Err()
	if err != nil {
		return fmt.Errorf("limitstore: writing snapshot of %q: %w", snap.TenantID, err)
	}
	return nil
}

// Republish keeps a live tenant's snapshot in Redis: an identical stored
// snapshot only gets its TTL back (no announcement, so no limiter drops its
// cache), a missing or different one is written and announced as by
// PutSnapshot. written says which happened.
func (s *Store) Republish(ctx context.Context, snap limiter.Snapshot) (written bool, err error) {
	if !validName(snap.TenantID) {
		return false, fmt.Errorf("%w: snapshot tenant id %q", limiter.ErrInvalidRequest, snap.TenantID)
	}
	raw, err := json.Marshal(snap)
	if err != nil {
		return false, fmt.Errorf("limitstore: encoding snapshot: %w", err)
	}
	ttl := max(int64(s.SnapshotTTL/time.Second), 1)
	n, err := republishScript.Run(ctx, s.rdb, []string{s.keys.Snapshot(snap.TenantID), s.keys.Limits(snap.TenantID)},
		raw, snap.Version, ttl, s.keys.Invalidations(), snap.TenantID+":"+strconv.FormatInt(snap.Version, 10)).Int64()
	if err != nil {
		return false, fmt.Errorf("limitstore: republishing snapshot of %q: %w", snap.TenantID, err)
	}
	return n == 1, nil
}

// DeleteSnapshot removes the tenant's snapshot and publishes
// "<tenant>:-1" so that every Limiter drops its copy.
func (s *Store) DeleteSnapshot(ctx context.Context, tenant string) error {
	err := deleteSnapshotScript.Run(ctx, s.rdb, []string{s.keys.Snapshot(tenant), s.keys.Limits(tenant)}, s.keys.Invalidations(), tenant+":-1").Err()
	if err != nil {
		return fmt.Errorf("limitstore: deleting snapshot of %q: %w", tenant, err)
	}
	return nil
}

// Snapshot reads the stored snapshot; ok is false when there is none.
func (s *Store) Snapshot(ctx context.Context, tenant string) (snap limiter.Snapshot, ok bool, err error) {
	raw, err := s.rdb.Get(ctx, s.keys.Snapshot(tenant)).Bytes()
	if errors.Is(err, redis.Nil) {
		return limiter.Snapshot{}, false, nil
	}
	if err != nil {
		return limiter.Snapshot{}, false, fmt.Errorf("limitstore: reading snapshot of %q: %w", tenant, err)
	}
	if err := json.Unmarshal(raw, &snap); err != nil {
		return limiter.Snapshot{}, false, fmt.Errorf("limitstore: snapshot of %q: %w", tenant, err)
	}
	return snap, true, nil
}

var addUsageScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('INCRBY', KEYS[1], ARGV[1])
`)

// AddUsage adds n to the tenant's Quota counter of the period if the
// counter exists. It is for usage already committed to Postgres: a missing
// counter is rebuilt from Postgres on its next use, which includes n.
func (s *Store) AddUsage(ctx context.Context, tenant, meter string, periodStart time.Time, n int64) error {
	if n == 0 {
		return nil
	}
	err := addUsageScript.Run(ctx, s.rdb, []string{s.keys.Quota(tenant, meter, periodStart)}, n).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limitstore: adding usage of %q %s: %w", tenant, meter, err)
	}
	return nil
}

// Used reads the Quota counter of the period; ok is false when it is
// missing from Redis.
func (s *Store) Used(ctx context.Context, tenant, meter string, periodStart time.Time) (n int64, ok bool, err error) {
	n, err = s.rdb.Get(ctx, s.keys.Quota(tenant, meter, periodStart)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("limitstore: reading usage of %q %s: %w", tenant, meter, err)
	}
	return n, true, nil
}

// PendingKey names one counter of limiter-counted usage waiting to be
// flushed to Postgres.
type PendingKey struct {
	Tenant      string
	Meter       string
	PeriodStart time.Time
}

// ScanPending calls fn once per pending or flushing counter (on every
// master of a Cluster, every shard of a Ring). It scans the whole keyspace:
// the flush reads DirtyPending instead, and only AdoptUnmarked scans, once. fn may be called for a key
// whose counter has meanwhile been flushed; ClaimPending then finds nothing.
func (s *Store) ScanPending(ctx context.Context, fn func(PendingKey) error) error {
	base := globEscape(s.keys.Base()) + ":{t:"
	pattern := base + "*}:q[pf]:*"
	seen := map[string]bool{}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				pk, id, ok := s.parsePending(k)
				if !ok || seen[id] {
					continue
				}
				seen[id] = true
				if err := fn(pk); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		// fn runs on one goroutine per master; serialise it.
		ch := make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			var keys []string
			var cursor uint64
			for {
				ks, next, err := m.Scan(ctx, cursor, pattern, 1000).Result()
				if err != nil {
					return err
				}
				keys = append(keys, ks...)
				if next == 0 {
					break
				}
				cursor = next
			}
			ch <- struct{}{}
			defer func() { <-ch }()
			for _, k := range keys {
				pk, id, ok := s.parsePending(k)
				if !ok || seen[id] {
					continue
				}
				seen[id] = true
				if err := fn(pk); err != nil {
					return err
				}
			}
			return nil
		})
	case *redis.Ring:
		ch := make(chan struct{}, 1)
		err = c.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error {
			ch <- struct{}{}
			defer func() { <-ch }()
			return scan(ctx, sh)
		})
	default:
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return fmt.Errorf("limitstore: scanning pending counters: %w", err)
	}
	return nil
}

// parsePending parses "<p>:{t:<tenant>}:q[pf]:<meter>:<unix>".
func (s *Store) parsePending(key string) (PendingKey, string, bool) {
	rest, ok := strings.CutPrefix(key, s.keys.Base()+":{t:")
	if !ok {
		return PendingKey{}, "", false
	}
	i := strings.Index(rest, "}:")
	if i < 0 {
		return PendingKey{}, "", false
	}
	tenant, rest := rest[:i], rest[i+2:]
	if !strings.HasPrefix(rest, "qp:") && !strings.HasPrefix(rest, "qf:") {
		return PendingKey{}, "", false
	}
	rest = rest[3:]
	j := strings.LastIndexByte(rest, ':')
	if j < 0 {
		return PendingKey{}, "", false
	}
	unix, err := strconv.ParseInt(rest[j+1:], 10, 64)
	if err != nil || j == 0 {
		return PendingKey{}, "", false
	}
	pk := PendingKey{Tenant: tenant, Meter: rest[:j], PeriodStart: time.Unix(unix, 0).UTC()}
	return pk, tenant + "\x00" + rest, true
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Claim is a batch of pending usage taken out of Redis for one flush.
type Claim struct {
	ID string
	N  int64
}

// claimScript: KEYS pending, flushing, dirty set. With nothing to flush
// the counter's dirty mark goes.
var claimScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[2], 'id', 'n')
if f[1] then return {f[1], tonumber(f[2])} end
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n == 0 then
  redis.call('SREM', KEYS[3], KEYS[1])
  return false
end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'n', n)
redis.call('EXPIRE', KEYS[2], 3456000)
if redis.call('DECRBY', KEYS[1], n) == 0 then redis.call('DEL', KEYS[1]) end
return {ARGV[1], n}
`)

// ackScript: KEYS flushing, pending, dirty set. The dirty mark goes with
// the last of the counter's unflushed usage; a pending counter grown since
// the claim keeps it.
var ackScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], KEYS[2]) end
return 1
`)

// ClaimPending moves the pending growth of a counter into a flushing record
// and returns it; ok is false when there is nothing to flush. A flushing
// record left by an earlier claim that was never acknowledged is returned
// unchanged (same ID), so a flush retried after a crash is recognised by
// its ID. Flush protocol: ClaimPending, then in one Postgres transaction
// insert the claim ID (unique) and add N to durable usage, then AckPending.
func (s *Store) ClaimPending(ctx context.Context, k PendingKey) (Claim, bool, error) {
	keys := []string{s.keys.Pending(k.Tenant, k.Meter, k.PeriodStart), s.keys.Flushing(k.Tenant, k.Meter, k.PeriodStart), s.keys.DirtyPending(k.Tenant)}
	res, err := claimScript.Run(ctx, s.rdb, keys, newID()).Slice()
	if errors.Is(err, redis.Nil) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, fmt.Errorf("limitstore: claiming pending usage: %w", err)
	}
	if len(res) != 2 {
		return Claim{}, false, fmt.Errorf("limitstore: claiming pending usage: reply of %d elements", len(res))
	}
	id, ok1 := res[0].(string)
	n, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return Claim{}, false, fmt.Errorf("limitstore: claiming pending usage: malformed reply")
	}
	return Claim{ID: id, N: n}, true, nil
}

// AckPending deletes the flushing record of a claim once it is committed
// to Postgres; a record with another ID is left alone.
func (s *Store) AckPending(ctx context.Context, k PendingKey, id string) error {
	keys := []string{s.keys.Flushing(k.Tenant, k.Meter, k.PeriodStart), s.keys.Pending(k.Tenant, k.Meter, k.PeriodStart), s.keys.DirtyPending(k.Tenant)}
	err := ackScript.Run(ctx, s.rdb, keys, id).Err()
	if err != nil {
		return fmt.Errorf("limitstore: acknowledging flush: %w", err)
	}
	return nil
}

// Refusals returns the tenant's refusals per policy on the UTC day of day.
func (s *Store) Refusals(ctx context.Context, tenant string, day time.Time) (map[string]int64, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Refusals(tenant, day)).Result()
	if err != nil {
		return nil, fmt.Errorf("limitstore: reading refusals of %q: %w", tenant, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("limitstore: refusals of %q: %w", tenant, err)
		}
		out[k] = n
	}
	return out, nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validName is the limiter's rule for tenant ids: printable ASCII without
// spaces or braces (they would break the hash tag).
func validName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return false
		}
	}
	return true
}
