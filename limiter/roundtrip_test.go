package limiter_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// counted returns a limiter on its own client whose round trips are
// counted, after its invalidation subscription is confirmed (until then
// every snapshot is read per decision, by design).
func counted(t *testing.T, b *backend, opts limiter.Options) (*limiter.Limiter, *roundTrips, *store) {
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
	limitertest.Eventually(t, 5*time.Second, "subscription confirmed", subscribed.Load)
	return l, rt, newStore(b.client(), b.prefix)
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

// TestOneRoundTripPastTheNearCache: with more active tenants than the
// near-cache holds, a tenant missing from it is still decided in one round
// trip (the script reads the limits hash), and quotas stay exact across
// decisions by reference and from the cache. A plan change (the store's
// write deletes the limits hash) applies at the next decision.
func TestOneRoundTripPastTheNearCache(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, rt, st := counted(t, b, limiter.Options{Timeout: 2 * time.Second, CacheSize: 4})
		ctx := context.Background()
		var tenants []string
		for i := 0; i < 40; i++ {
			tn := "far-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			tenants = append(tenants, tn)
			put(t, st, snapshot(tn, func(s *limiter.Snapshot) {
				s.Rate = &limiter.Rate{PerSecond: 1000, Burst: 1000}
				s.Quotas = map[string]limiter.Quota{"requests": {Limit: 5}}
			}))
		}
		admitted := map[string]int{}
		allow := func(tn string) {
			d, err := l.Allow(ctx, tn, limiter.Request{Cost: 1})
			if err != nil || d.Fallback != "" {
				t.Fatalf("%s: %+v, %v", tn, d, err)
			}
			if d.Plan != "pro" || len(d.Policies) != 2 || d.Policies[1].Limit != 5 || d.Policies[0].Limit != 1000 {
				t.Fatalf("%s: decision %+v", tn, d)
			}
			if d.Allowed {
				admitted[tn]++
			}
		}
		for _, tn := range tenants { // first visit: reads each snapshot once
			allow(tn)
		}
		before := rt.n.Load()
		for round := 0; round < 4; round++ {
			for _, tn := range tenants {
				allow(tn)
			}
		}
		if got, want := rt.n.Load()-before, int64(4*len(tenants)); got != want {
			t.Errorf("%d round trips for %d decisions past a near-cache of 4, want %d", got, want, want)
		}
		// Past the quota: refused by Redis once, then from the refusal
		// cache, though the tenant is not in the near-cache.
		for _, tn := range tenants {
			allow(tn)
		}
		before = rt.n.Load()
		for i := 0; i < 10; i++ {
			allow(tenants[len(tenants)-1])
		}
		if got := rt.n.Load() - before; got > 1 { // the cached refusals' count may be flushed meanwhile
			t.Errorf("%d round trips for a hammering tenant's refusals, want none", got)
		}
		for _, tn := range tenants {
			if admitted[tn] != 5 {
				t.Fatalf("%s admitted %d on a quota of 5", tn, admitted[tn])
			}
		}
		// A plan change reaches decisions by reference at once.
		put(t, st, snapshot(tenants[10], func(s *limiter.Snapshot) {
			s.Version, s.Plan = 2, "enterprise"
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: 10}}
		}))
		d, err := l.Allow(ctx, tenants[10], limiter.Request{Cost: 1})
		if err != nil || d.Plan != "enterprise" || !d.Allowed {
			t.Fatalf("after the plan change: %+v, %v", d, err)
		}
	})
}

// TestLoaderLimitsPastSafetyTTLCostNoTrip: limits that come from the Loader
// (nothing stored in Redis, as with RemoteLoaders) are re-checked past the
// safety TTL by asking the Loader off the decision's path, so a decision
// stays one round trip, in the near-cache and by reference; a version the
// Loader changes is picked up.
func TestLoaderLimitsPastSafetyTTLCostNoTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int
	}{{"near-cache", 0}, {"by reference", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			b := singleRedis(t)
			var version atomic.Int64
			version.Store(1)
			var loads atomic.Int64
			l, rt, _ := counted(t, b, limiter.Options{Timeout: 2 * time.Second, CacheTTL: time.Millisecond, CacheSize: tc.cache,
				Loader: func(_ context.Context, tenant string) (limiter.Snapshot, error) {
					loads.Add(1)
					s := rateQuota(tenant)
					if s.Version = version.Load(); s.Version > 1 {
						s.Plan = "enterprise"
					}
					return s, nil
				}})
			ctx := context.Background()
			var tenants []string
			for i := 0; i < 12; i++ {
				tenants = append(tenants, "ld-"+string(rune('a'+i)))
			}
			allow := func(tn string) *limiter.Decision {
				t.Helper()
				d, err := l.Allow(ctx, tn, limiter.Request{Cost: 1})
				if err != nil || !d.Allowed || d.Fallback != "" {
					t.Fatalf("%s: %+v, %v", tn, d, err)
				}
				return d
			}
			for _, tn := range tenants { // first visit: reads each snapshot once
				allow(tn)
			}
			loads0 := loads.Load()
			rdb := b.client()
			limKey := b.prefix + ":{t:" + tenants[0] + "}:lim"
			at0 := rdb.HGet(ctx, limKey, "at").Val()
			before := rt.n.Load()
			const rounds = 20
			for r := 0; r < rounds; r++ {
				for _, tn := range tenants {
					allow(tn)
				}
				time.Sleep(2 * time.Millisecond) // past the safety TTL: every limit is due again
			}
			if got, want := rt.n.Load()-before, int64(rounds*len(tenants)); got != want {
				t.Errorf("%d round trips for %d decisions on limits past their safety TTL, want %d", got, want, want)
			}
			if loads.Load() == loads0 {
				t.Error("the Loader was never asked again past the safety TTL")
			}
			if tc.cache > 0 {
				// The Loader's confirmations were written by the decisions.
				if at := rdb.HGet(ctx, limKey, "at").Val(); at0 == "" || at == at0 {
					t.Errorf("limits hash at %q, %q after the rounds: no confirmation was written", at0, at)
				}
			}
			version.Store(2)
			limitertest.Eventually(t, 5*time.Second, "the Loader's new version in decisions", func() bool {
				return allow(tenants[3]).Plan == "enterprise"
			})
		})
	}
}

// roundTrips counts client round trips: one per command, one per pipeline.
type roundTrips struct {
	n    atomic.Int64
	cmds sync.Map // command name -> *atomic.Int64 (single commands only)
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if background(cmd) {
			return next(ctx, cmd)
		}
		h.n.Add(1)
		c, _ := h.cmds.LoadOrStore(cmd.Name(), new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		c, _ := h.cmds.LoadOrStore("pipeline", new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return next(ctx, cmds)
	}
}

// count returns how many single commands named name were sent.
func (h *roundTrips) count(name string) int64 {
	if c, ok := h.cmds.Load(name); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}
