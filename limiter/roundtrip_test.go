package limiter_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
)

// counted returns a limiter on its own client whose round trips are
// counted, after its invalidation subscription is confirmed (until then
// every snapshot is read per decision, by design).
func counted(t *testing.T, b *backend, opts limiter.Options) (*limiter.Limiter, *roundTrips, *limitstore.Store) {
	t.Helper()
	rdb := b.client()
	rt := &roundTrips{}
	rdb.AddHook(rt)
	opts.Prefix = b.prefix
	var subscribed atomic.Bool
	opts.Hooks.OnInvalidation = func(tenant string, all bool) {
		if all && tenant == "" {
			subscribed.Store(true)
		}
	}
	l := newLimiter(t, rdb, opts)
	poll(t, 5*time.Second, "subscription confirmed", subscribed.Load)
	return l, rt, limitstore.New(b.client(), b.prefix)
}

func rateQuota(tenant string) limiter.Snapshot {
	return snapshot(tenant, func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 1e6, Burst: 1e6}
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 1 << 40}}
	})
}

// TestOneRoundTripPerDecision: in steady state a decision is one EVALSHA
// and the entitlement lookup none, also when every cached snapshot is past
// its safety TTL (the re-read rides on the decision's script).
func TestOneRoundTripPerDecision(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"fresh", 0}, {"past safety TTL", time.Nanosecond}} {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				l, rt, st := counted(t, b, limiter.Options{Timeout: 2 * time.Second, CacheTTL: tc.ttl})
				ctx := context.Background()
				tenants := []string{"rt-a", "rt-b", "rt-c"}
				for _, tn := range tenants {
					put(t, st, rateQuota(tn))
					if _, err := l.Allow(ctx, tn, limiter.Request{Cost: 1}); err != nil { // fills the near-cache
						t.Fatal(err)
					}
				}
				before, gets := rt.n.Load(), rt.count("get")
				const n = 60
				for i := 0; i < n; i++ {
					d, err := l.Allow(ctx, tenants[i%len(tenants)], limiter.Request{Cost: 1})
					if err != nil || !d.Allowed || d.Fallback != "" {
						t.Fatalf("decision %d: %+v, %v", i, d, err)
					}
				}
				if got := rt.n.Load() - before; got != n {
					t.Errorf("%d round trips for %d decisions, want exactly %d", got, n, n)
				}
				if got := rt.count("get") - gets; got != 0 {
					t.Errorf("%d snapshot GETs in steady state, want 0", got)
				}
			})
		})
	}
}

// TestSafetyReadDropsChangedSnapshot: a snapshot changed in Redis without an
// invalidation (a lost message) is noticed by the safety re-read inside the
// decision script, and the next decision uses it.
func TestSafetyReadDropsChangedSnapshot(t *testing.T) {
	b := singleRedis(t)
	l, _, st := counted(t, b, limiter.Options{Timeout: 2 * time.Second, CacheTTL: time.Nanosecond})
	ctx := context.Background()
	s := rateQuota("silent")
	put(t, st, s)
	if d, err := l.Allow(ctx, "silent", limiter.Request{Cost: 1}); err != nil || d.Plan != "pro" {
		t.Fatalf("%+v, %v", d, err)
	}
	// Write version 2 behind the limiter's back: no PUBLISH.
	s.Version, s.Plan = 2, "enterprise"
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.client().Set(ctx, st.Keys().Snapshot("silent"), raw, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var plans []string
	for i := 0; i < 2; i++ {
		d, err := l.Allow(ctx, "silent", limiter.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, d.Plan)
	}
	// The first decision still ran on the cached limits and read version 2
	// back; the second runs on version 2.
	if plans[1] != "enterprise" {
		t.Fatalf("plans %v, want the changed snapshot by the second decision", plans)
	}
}
