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
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Store publishes snapshots and flushes quota counters.
type Store struct {
	rdb  redis.UniversalClient
	keys keyspace.Keys
	// SnapshotTTL is how long a written snapshot lives without being written
	// again; default 7 days. The Loader brings back an expired one.
	SnapshotTTL time.Duration
}

// New returns a Store on rdb with the key prefix ("" = "tg").
func New(rdb redis.UniversalClient, prefix string) *Store {
	_, cluster := rdb.(*redis.ClusterClient)
	return &Store{rdb: rdb, keys: keyspace.Keys{Prefix: prefix, Cluster: cluster}, SnapshotTTL: 7 * 24 * time.Hour}
}

// Keys returns the key names the Store uses.
func (s *Store) Keys() keyspace.Keys { return s.keys }

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
redis.call('DEL', KEYS[2]) -- the limits hash, as in keyspace.Keys.PutSnapshot
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
	_, err = s.keys.PutSnapshot(ctx, s.rdb, snap.TenantID, raw, snap.Version, s.SnapshotTTL)
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
		raw, snap.Version, ttl, s.keys.Invalidations(), keyspace.Invalidation(snap.TenantID, snap.Version)).Int64()
	if err != nil {
		return false, fmt.Errorf("limitstore: republishing snapshot of %q: %w", snap.TenantID, err)
	}
	return n == 1, nil
}

// DeleteSnapshot removes the tenant's snapshot and publishes
// "<tenant>:-1" so that every Limiter drops its copy.
func (s *Store) DeleteSnapshot(ctx context.Context, tenant string) error {
	err := deleteSnapshotScript.Run(ctx, s.rdb, []string{s.keys.Snapshot(tenant), s.keys.Limits(tenant)}, s.keys.Invalidations(), keyspace.Invalidation(tenant, -1)).Err()
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
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return false end
redis.call('HINCRBY', KEYS[1], ARGV[2], ARGV[3])
return redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[3])
`)

// AddUsage adds n to the tenant's period counter if it exists, and to its
// flushed mark: the usage is already committed to Postgres, so the flush
// must not move it again. A missing counter is rebuilt from Postgres on
// its next use, which includes n.
func (s *Store) AddUsage(ctx context.Context, tenant, meter string, periodStart time.Time, n int64) error {
	if n == 0 {
		return nil
	}
	c := keyspace.CounterOf(meter, periodStart)
	err := addUsageScript.Run(ctx, s.rdb, []string{s.keys.State(tenant)}, c.Used(), c.Flushed(), n).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("limitstore: adding usage of %q %s: %w", tenant, meter, err)
	}
	return nil
}

// Used reads the period counter; ok is false when it is missing from
// Redis.
func (s *Store) Used(ctx context.Context, tenant, meter string, periodStart time.Time) (n int64, ok bool, err error) {
	n, err = s.rdb.HGet(ctx, s.keys.State(tenant), keyspace.CounterOf(meter, periodStart).Used()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("limitstore: reading usage of %q %s: %w", tenant, meter, err)
	}
	return n, true, nil
}

// Unflushed returns what of the period counter the flush has not moved to
// Postgres yet (q − f; negative after refunds), 0 when it is missing.
func (s *Store) Unflushed(ctx context.Context, tenant, meter string, periodStart time.Time) (int64, error) {
	c := keyspace.CounterOf(meter, periodStart)
	v, err := s.rdb.HMGet(ctx, s.keys.State(tenant), c.Used(), c.Flushed()).Result()
	if err != nil {
		return 0, fmt.Errorf("limitstore: reading usage of %q %s: %w", tenant, meter, err)
	}
	var n [2]int64
	for i, x := range v {
		if x, ok := x.(string); ok {
			if n[i], err = strconv.ParseInt(x, 10, 64); err != nil {
				return 0, fmt.Errorf("limitstore: usage of %q %s: %w", tenant, meter, err)
			}
		}
	}
	return n[0] - n[1], nil
}

// PendingKey names one period counter with limiter-counted usage waiting to
// be flushed to Postgres.
type PendingKey struct {
	Tenant      string
	Meter       string
	PeriodStart time.Time
}

// ScanPending calls fn once per counter with unflushed usage or a claim
// (on every master of a Cluster, every shard of a Ring). It scans the
// whole keyspace and reads every state hash: the flush reads DirtyPending
// instead, and only AdoptUnmarked scans, once.
func (s *Store) ScanPending(ctx context.Context, fn func(PendingKey) error) error {
	pattern := globEscape(s.keys.Base()) + ":{t:*}:st"
	var mu sync.Mutex // fn is called from one goroutine at a time
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				tenant, ok := s.parseState(k)
				if !ok {
					continue
				}
				h, err := c.HGetAll(ctx, k).Result()
				if err != nil {
					return err
				}
				for _, pk := range unflushed(tenant, h) {
					mu.Lock()
					err := fn(pk)
					mu.Unlock()
					if err != nil {
						return err
					}
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
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error { return scan(ctx, sh) })
	default:
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return fmt.Errorf("limitstore: scanning pending counters: %w", err)
	}
	return nil
}

// unflushed lists the counters of a state hash with something to flush:
// q ≠ f, a pending claim (ci ≠ ca), or usage kept for a rebuild (g).
func unflushed(tenant string, h map[string]string) []PendingKey {
	var out []PendingKey
	for f, v := range h {
		typ, sfx, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		switch {
		case typ == "q" && v != h["f:"+sfx] && !(v == "0" && h["f:"+sfx] == ""),
			typ == "ci" && v != h["ca:"+sfx], // a claim not acknowledged
			typ == "g":
		default:
			continue
		}
		j := strings.LastIndexByte(sfx, ':')
		if j <= 0 {
			continue
		}
		unix, err := strconv.ParseInt(sfx[j+1:], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, PendingKey{Tenant: tenant, Meter: sfx[:j], PeriodStart: time.Unix(unix, 0).UTC()})
	}
	return out
}

// parseState parses "<p>:{t:<tenant>}:st".
func (s *Store) parseState(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.keys.Base()+":{t:")
	if !ok {
		return "", false
	}
	tenant, ok := strings.CutSuffix(rest, "}:st")
	return tenant, ok && tenant != ""
}

// parsePending parses a mark, "<p>:{t:<tenant>}:qp:<meter>:<unix>".
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
	rest, ok = strings.CutPrefix(rest, "qp:")
	if !ok {
		return PendingKey{}, "", false
	}
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
	// Seq is the counter's flush sequence as its last acknowledgement
	// wrote it (cs): how many of its claims Postgres had counted then, 0
	// when unknown (a counter rebuilt, or written before the sequence).
	Seq int64
	// Grants are what each grant of the meter gave since the last claim,
	// as Redis decided it (nil: none).
	Grants []GrantDraw
}

// GrantDraw is what one grant gave in a claim.
type GrantDraw struct {
	ID    string
	Units int64
}

// parseGrantDraws reads a claim's kc field: "<grant id> <units> " each.
func parseGrantDraws(kc string) ([]GrantDraw, error) {
	f := strings.Fields(kc)
	if len(f)%2 != 0 {
		return nil, fmt.Errorf("malformed grant draws %q", kc)
	}
	var out []GrantDraw
	for i := 0; i < len(f); i += 2 {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed grant draws %q", kc)
		}
		out = append(out, GrantDraw{ID: f[i], Units: n})
	}
	return out, nil
}

// ClaimPending moves the unflushed growth of a counter (q − f) into a claim
// and returns it; ok is false when there is nothing to flush. A claim left
// by an earlier pass that was never acknowledged is returned unchanged
// (same ID), so a flush retried after a crash is recognised by its ID.
// Flush protocol: ClaimPending, then in one Postgres transaction insert the
// claim ID (unique) and add N to durable usage, then AckPending. (The
// worker uses the batch forms, ClaimPendingBatch and AckPendingBatch.)
func (s *Store) ClaimPending(ctx context.Context, k PendingKey) (Claim, bool, error) {
	cs, err := s.ClaimPendingBatch(ctx, []PendingKey{k})
	if err != nil {
		return Claim{}, false, err
	}
	return cs[0], cs[0].ID != "", nil
}

// AckPending ends a claim once it is committed to Postgres; a claim with
// another ID is left alone, and a claim Redis lost meanwhile makes the
// counter be rebuilt (see ackBatchScript).
func (s *Store) AckPending(ctx context.Context, k PendingKey, id string) error {
	return s.AckPendingBatch(ctx, []PendingKey{k}, []Ack{{ID: id}})
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

// PutGrants writes the tenant's grants where the limiter draws them
// (keyspace.Keys.PutGrants): load reads them from the ledger after the
// state hash's epoch is read, again when it moved meanwhile.
func (s *Store) PutGrants(ctx context.Context, tenant string, load func(context.Context) ([]keyspace.Grant, error)) error {
	return s.keys.PutGrants(ctx, s.rdb, tenant, load)
}

// Grants returns what Redis holds of the tenant's grants of meter: each
// grant's remaining by id (closed ones left out); empty when Redis has none.
func (s *Store) Grants(ctx context.Context, tenant, meter string) (map[string]int64, error) {
	gs, err := s.keys.Grants(ctx, s.rdb, tenant, meter)
	if err != nil {
		return nil, fmt.Errorf("limitstore: %w", err)
	}
	out := make(map[string]int64, len(gs))
	for _, g := range gs {
		if !g.Closed {
			out[g.ID] = g.Remaining
		}
	}
	return out, nil
}
