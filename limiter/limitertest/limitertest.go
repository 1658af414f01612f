// Package limitertest helps a backend test its own code against the real
// limiter, the way Tollgate's server will feed it: a Redis per test with a
// key prefix of its own, snapshots put where Tollgate's server puts them
// (or handed out by an in-memory Loader), what the limiter counted read
// back, and assertions on decisions.
//
//	func TestExportsAreMetered(t *testing.T) {
//		rdb, prefix := limitertest.Redis(t)
//		snap := limitertest.Snapshot("acme", func(s *limiter.Snapshot) {
//			s.Quotas = map[string]limiter.Quota{"exports": {Limit: 1}}
//		})
//		l := limitertest.New(t, rdb, limiter.Options{Prefix: prefix, Loader: limitertest.Loader(snap)})
//		limitertest.Allowed(t, l, "acme", limiter.Request{Meter: "exports"})
//		limitertest.Refused(t, l, "acme", limiter.Request{Meter: "exports"}, "exports")
//	}
//
// The Redis is REDISTEST_URL's (default redis://127.0.0.1:6379/0), shared
// with other tests: every key a test makes starts with its prefix, and the
// prefix's keys are unlinked (SCAN + UNLINK, never FLUSHDB) when the test
// ends. Without a Redis a test skips, and fails when CI is set, so that CI
// never passes without running it.
package limitertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"
)

// URL is the Redis the tests use: REDISTEST_URL, else
// redis://127.0.0.1:6379/0.
func URL() string { return redisproc.URL() }

// Redis returns a client to URL's Redis and a key prefix unique to the
// test (for limiter.Options.Prefix); both are cleaned up when the test
// ends. The client has ContextTimeoutEnabled, as a backend's should.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("limitertest: %v", err)
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		redisproc.Unavailable(t, "redis at "+URL(), err)
	}
	prefix := Prefix()
	t.Cleanup(func() {
		Clean(context.Background(), rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// Prefix makes a fresh key prefix.
func Prefix() string { return redisproc.Prefix() }

// Clean unlinks every key under prefix (on every master of a Cluster,
// every shard of a Ring), with SCAN and UNLINK: never FLUSHDB on a server
// other tests share.
func Clean(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	redisproc.Clean(ctx, rdb, prefix)
}

// New returns a Limiter on rdb, closed when the test ends.
func New(t testing.TB, rdb redis.UniversalClient, opts limiter.Options) *limiter.Limiter {
	t.Helper()
	l, err := limiter.New(rdb, opts)
	if err != nil {
		t.Fatalf("limitertest: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Snapshot returns an active snapshot of plan "pro", version 1, for tenant
// in a 30-day period that began yesterday (UTC), with no limits; mod, if
// not nil, sets the limits.
func Snapshot(tenant string, mod func(*limiter.Snapshot)) limiter.Snapshot {
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	s := limiter.Snapshot{
		TenantID: tenant, Plan: "pro", Status: "active", Version: 1,
		PeriodStart: start, PeriodEnd: start.AddDate(0, 0, 30), NextPeriodEnd: start.AddDate(0, 0, 60),
	}
	if mod != nil {
		mod(&s)
	}
	return s
}

// Snapshots is an in-memory limiter.SnapshotLoader, for a backend that
// keeps its plans itself or a test that needs no Redis-side snapshot. It
// is safe for concurrent use.
type Snapshots struct {
	mu    sync.Mutex
	snaps map[string]limiter.Snapshot
	calls map[string]int
}

// Loader returns Snapshots holding snaps; pass its Load as
// limiter.Options.Loader.
func Loader(snaps ...limiter.Snapshot) limiter.SnapshotLoader {
	return NewSnapshots(snaps...).Load
}

// NewSnapshots returns Snapshots holding snaps.
func NewSnapshots(snaps ...limiter.Snapshot) *Snapshots {
	s := &Snapshots{snaps: map[string]limiter.Snapshot{}, calls: map[string]int{}}
	for _, snap := range snaps {
		s.Set(snap)
	}
	return s
}

// Set adds or replaces the snapshot of snap.TenantID.
func (s *Snapshots) Set(snap limiter.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snaps[snap.TenantID] = snap
}

// Load is the limiter.SnapshotLoader: limiter.ErrUnknownTenant for a tenant
// it does not hold.
func (s *Snapshots) Load(_ context.Context, tenant string) (limiter.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[tenant]++
	snap, ok := s.snaps[tenant]
	if !ok {
		return limiter.Snapshot{}, fmt.Errorf("limitertest: %q: %w", tenant, limiter.ErrUnknownTenant)
	}
	return snap, nil
}

// Calls is how many times Load was asked for tenant.
func (s *Snapshots) Calls(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tenant]
}

// PutSnapshot writes snap to Redis under prefix as Tollgate's server does
// (kept 7 days, announced to every limiter of the prefix, which drop their
// cached copy); an older version than the stored one is ignored.
func PutSnapshot(t testing.TB, rdb redis.UniversalClient, prefix string, snap limiter.Snapshot) {
	t.Helper()
	raw, err := json.Marshal(snap)
	if err != nil {
		t.Fatalf("limitertest: %v", err)
	}
	if _, err := (keyspace.Keys{Prefix: prefix}).PutSnapshot(context.Background(), rdb, snap.TenantID, raw, snap.Version, 7*24*time.Hour); err != nil {
		t.Fatalf("limitertest: writing the snapshot of %q: %v", snap.TenantID, err)
	}
}

// Used is what the limiter counted of tenant's meter in the period starting
// at periodStart (0 when nothing was).
func Used(t testing.TB, rdb redis.UniversalClient, prefix, tenant, meter string, periodStart time.Time) int64 {
	t.Helper()
	n, err := rdb.HGet(context.Background(), (keyspace.Keys{Prefix: prefix}).State(tenant), keyspace.CounterOf(meter, periodStart).Used()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("limitertest: reading the usage of %q %s: %v", tenant, meter, err)
	}
	return n
}

// Refusals is the tenant's refusals per policy on the UTC day of day, as
// Tollgate's dashboard reads them. The limiter adds refusals it answered
// without Redis (its refusal cache, the local fail mode) within a second:
// poll with Eventually for an exact figure.
func Refusals(t testing.TB, rdb redis.UniversalClient, prefix, tenant string, day time.Time) map[string]int64 {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), (keyspace.Keys{Prefix: prefix}).Refusals(tenant, day)).Result()
	if err != nil {
		t.Fatalf("limitertest: reading the refusals of %q: %v", tenant, err)
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("limitertest: refusals of %q: %v", tenant, err)
		}
		out[k] = n
	}
	return out
}

// Eventually polls cond every few milliseconds until it holds, and fails
// the test naming what did not happen if it still does not after within
// (be generous: on two loaded cores under -race a second can take ten).
// It returns how long cond took.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	return time.Since(start)
}
