package limiter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// extTrips counts the round trips (commands and pipelines) of the calls
// whose context carries extTripsKey, so that the limiter's own background
// work (heartbeats, probes, the subscription) is not counted.
type extTrips struct {
	n    atomic.Int64
	mu   sync.Mutex
	cmds []string
}

type extTripsKey struct{}

func (h *extTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *extTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(extTripsKey{}) != nil {
			h.n.Add(1)
			h.mu.Lock()
			h.cmds = append(h.cmds, cmd.Name())
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *extTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(extTripsKey{}) != nil {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// trips is the number of round trips fn made.
func (h *extTrips) trips(fn func(ctx context.Context)) int64 {
	before := h.n.Load()
	fn(context.WithValue(context.Background(), extTripsKey{}, true))
	return h.n.Load() - before
}

// setAlias writes an alias as Tollgate's server does (its limitstore.MoveAlias):
// the old one deleted, the new one set, the tenant announced.
func setAlias(t *testing.T, rdb redis.UniversalClient, prefix, tenant, old, new string) {
	t.Helper()
	ctx := context.Background()
	ks := keyspace.Keys{Prefix: prefix}
	if old != "" {
		if err := rdb.Del(ctx, ks.Alias(old)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if new != "" {
		if err := rdb.Set(ctx, ks.Alias(new), tenant, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Publish(ctx, ks.Invalidations(), keyspace.Invalidation(tenant, 1)).Err(); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 5 ms until it holds or within fails.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// An external id resolves to its tenant in one GET the first time and
// none after, so that a decision by external id costs what one by tenant
// id does; a change or removal of the external id is seen within a second
// (the server's announcement), an unknown one is ErrUnknownTenant.
func TestExternalTenant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		rdb := b.client()
		hook := &extTrips{}
		rdb.AddHook(hook)
		l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second})
		put(t, newStore(b.client(), b.prefix), snapshot("ext-t", func(s *limiter.Snapshot) {
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: 100, Mode: limiter.ModeHard}}
		}))
		admin := b.client()
		// The subscription is live before anything is cached (a fresh
		// limiter caches nothing until it is).
		eventually(t, 10*time.Second, "subscribed", func() bool {
			n, _ := admin.PubSubNumSub(context.Background(), keyspace.Keys{Prefix: b.prefix}.Invalidations()).Result()
			for _, v := range n {
				if v > 0 {
					return true
				}
			}
			// A Cluster's PUBSUB NUMSUB answers for the node asked only.
			return b.name == "cluster"
		})
		setAlias(t, admin, b.prefix, "ext-t", "", "acct:42@eu")

		// Warm the snapshot cache: a decision by tenant id is the anchor.
		var byID int64
		for i := 0; i < 2; i++ {
			byID = hook.trips(func(ctx context.Context) {
				if d, err := l.Allow(ctx, "ext-t", limiter.Request{}); err != nil || !d.Allowed {
					t.Fatalf("by tenant id: %+v %v", d, err)
				}
			})
		}
		var id string
		eventually(t, 10*time.Second, "the alias is cached", func() bool {
			first := hook.trips(func(ctx context.Context) {
				var err error
				if id, err = l.ExternalTenant(ctx, "acct:42@eu"); err != nil || id != "ext-t" {
					t.Fatalf("ExternalTenant = %q, %v", id, err)
				}
			})
			if first > 1 {
				t.Fatalf("resolving an alias took %d round trips, want at most 1", first)
			}
			return first == 0
		})
		byExt := hook.trips(func(ctx context.Context) {
			id, err := l.ExternalTenant(ctx, "acct:42@eu")
			if err != nil {
				t.Fatal(err)
			}
			if d, err := l.Allow(ctx, id, limiter.Request{}); err != nil || !d.Allowed {
				t.Fatalf("by external id: %+v %v", d, err)
			}
		})
		if byExt != byID || byID != 1 {
			t.Fatalf("a decision by external id took %d round trips, by tenant id %d; want 1 each", byExt, byID)
		}

		// Changed: the old one unknown, the new one the tenant, within a second.
		setAlias(t, admin, b.prefix, "ext-t", "acct:42@eu", "acct:43@eu")
		took := eventually(t, time.Second, "the changed external id is seen", func() bool {
			_, err := l.ExternalTenant(context.Background(), "acct:42@eu")
			return errors.Is(err, limiter.ErrUnknownTenant)
		})
		t.Logf("change seen after %v", took)
		if id, err := l.ExternalTenant(context.Background(), "acct:43@eu"); err != nil || id != "ext-t" {
			t.Fatalf("new external id: %q %v", id, err)
		}
		// Removed.
		setAlias(t, admin, b.prefix, "ext-t", "acct:43@eu", "")
		eventually(t, time.Second, "the removed external id is seen", func() bool {
			_, err := l.ExternalTenant(context.Background(), "acct:43@eu")
			return errors.Is(err, limiter.ErrUnknownTenant)
		})
		for _, bad := range []string{"", "a b", "{x}", strings.Repeat("x", 129), "nobody"} {
			if _, err := l.ExternalTenant(context.Background(), bad); !errors.Is(err, limiter.ErrUnknownTenant) {
				t.Fatalf("ExternalTenant(%q) = %v, want ErrUnknownTenant", bad, err)
			}
		}
	})
}

// An alias missing from Redis is asked of ExternalLoader once, then cached;
// its failure is ErrUnavailable, its unknown ErrUnknownTenant.
func TestExternalTenantLoader(t *testing.T) {
	b := singleRedis(t)
	var asked atomic.Int64
	fail := atomic.Bool{}
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second,
		ExternalLoader: func(ctx context.Context, ext string) (string, error) {
			asked.Add(1)
			switch {
			case fail.Load():
				return "", errors.New("tollgate is away")
			case ext == "known":
				return "t-known", nil
			}
			return "", limiter.ErrUnknownTenant
		}})
	eventually(t, 10*time.Second, "the loaded alias is cached", func() bool {
		before := asked.Load()
		if id, err := l.ExternalTenant(context.Background(), "known"); err != nil || id != "t-known" {
			t.Fatalf("loaded: %q %v", id, err)
		}
		return asked.Load() == before
	})
	if _, err := l.ExternalTenant(context.Background(), "stranger"); !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("unknown to the loader: %v", err)
	}
	fail.Store(true)
	if _, err := l.ExternalTenant(context.Background(), "other"); !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("loader failing: %v", err)
	}
	// Without a loader, an alias missing from Redis is unknown.
	plain := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second})
	if _, err := plain.ExternalTenant(context.Background(), "known"); !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("no loader: %v", err)
	}
}
