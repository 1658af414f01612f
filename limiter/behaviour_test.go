package limiter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
)

func TestRefill(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	st := newStore(b.client(), b.prefix)
	const perSecond, burst, k = 20.0, 5, 4
	put(t, st, snapshot("refill", func(s *limiter.Snapshot) { s.Rate = &limiter.Rate{PerSecond: perSecond, Burst: burst} }))
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	takeAll := func() int {
		n := 0
		for {
			d, err := l.Allow(ctx, "refill", limiter.Request{Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				return n
			}
			n++
		}
	}
	if n := takeAll(); n < burst || n > burst+1 {
		t.Fatalf("first burst admitted %d, want %d", n, burst)
	}
	empty := time.Now()
	// Poll (peek) until k tokens are back, then take them all.
	limitertest.Eventually(t, 2*time.Second, "refill", func() bool {
		d, err := l.Allow(ctx, "refill", limiter.Request{Peek: true})
		return err == nil && d.Policies[0].Remaining >= k
	})
	waited := time.Since(empty)
	if min := time.Duration((k - 1) / perSecond * float64(time.Second)); waited < min {
		t.Fatalf("%d tokens back after %v, before %v", k, waited, min)
	}
	if n := takeAll(); n < k || n > k+1 {
		t.Fatalf("after %v admitted %d, want %d (within one token)", waited, n, k)
	}
}

func TestTenantsIsolatedAndKeysExpire(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	for _, tn := range []string{"a", "b"} {
		put(t, st, snapshot(tn, func(s *limiter.Snapshot) {
			s.Rate = &limiter.Rate{PerSecond: 1, Burst: 3}
			s.Concurrency = 2
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: 3}}
		}))
	}
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	for i := 0; i < 5; i++ {
		d, err := l.Allow(ctx, "a", limiter.Request{Cost: 1, Concurrency: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 2) && !(i == 2 && !d.Allowed && d.Policy == limiter.PolicyConcurrency) {
			t.Fatalf("a #%d: %+v", i, d)
		}
	}
	d, err := l.Allow(ctx, "b", limiter.Request{Cost: 1, Concurrency: true})
	if err != nil || !d.Allowed {
		t.Fatalf("tenant b affected by a: %+v %v", d, err)
	}
	for _, p := range d.Policies {
		if p.Remaining != p.Limit-1 {
			t.Fatalf("b's %s remaining %d of %d", p.Name, p.Remaining, p.Limit)
		}
	}
	// A refusal is counted for the dashboard.
	l.Allow(ctx, "a", limiter.Request{Cost: 1}) //nolint:errcheck
	ks, err := rdb.Keys(ctx, b.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(ks) < 8 {
		t.Fatalf("keys %v", ks)
	}
	for _, k := range ks {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no TTL (%v)", k, ttl)
		}
	}
	rf, err := st.Refusals(ctx, "a", time.Now())
	if err != nil || rf["concurrency"] < 1 {
		t.Fatalf("refusals %v %v", rf, err)
	}
}

func TestRebuildAfterRedisLoss(t *testing.T) {
	srv := startPrivate(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	st := newStore(rdb, "")
	s := snapshot("acme", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 10, Mode: limiter.ModeHard}}
	})
	put(t, st, s)
	var durable atomic.Int64
	l := newLimiter(t, rdb, limiter.Options{
		Loader: func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
			if tenant != "acme" {
				return limiter.Snapshot{}, limiter.ErrUnknownTenant
			}
			return s, st.PutSnapshot(ctx, s)
		},
		UsageLoader: func(ctx context.Context, tenant, meter string, start time.Time) (int64, error) {
			if !start.Equal(s.PeriodStart) {
				return 0, nil
			}
			return durable.Load(), nil
		},
		DisableRefusalCache: true,
	})
	admitted := 0
	for i := 0; i < 12; i++ {
		d, err := l.Allow(ctx, "acme", limiter.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d", admitted)
	}
	// The worker flushed everything to Postgres, then Redis lost it all.
	durable.Store(10)
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(ctx, "acme", limiter.Request{Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Policy != "requests" || d.RetryAfter < time.Hour {
		t.Fatalf("after Redis loss: %+v", d)
	}
	// A rebuild counts usage noted while the counter was missing too
	// (a settled reservation, a lost claim's growth): durable 3 + 4.
	rdb.FlushAll(ctx)
	durable.Store(3)
	k := keyspace.Keys{}
	rdb.HSet(ctx, k.State("acme"), keyspace.CounterOf("requests", s.PeriodStart).Missed(), 4)
	d, err = l.Allow(ctx, "acme", limiter.Request{Cost: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if used, _, _ := st.Used(ctx, "acme", "requests", s.PeriodStart); used != 8 {
		t.Fatalf("rebuilt counter %d, want 3+4+1", used)
	}
}

func TestPeriodRoll(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	now := time.Now().UTC().Truncate(time.Second)
	s := snapshot("roll", func(s *limiter.Snapshot) {
		s.PeriodStart, s.PeriodEnd, s.NextPeriodEnd = now.AddDate(0, -1, 0), now.Add(-time.Minute), now.AddDate(0, 1, 0)
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 5}}
	})
	put(t, st, s)
	keys := keyspace.Keys{Prefix: b.prefix}
	rdb.HSet(ctx, keys.State("roll"), keyspace.CounterOf("requests", s.PeriodStart).Used(), 5) // the old period is exhausted
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	d, err := l.Allow(ctx, "roll", limiter.Request{Cost: 1})
	if err != nil || !d.Allowed || d.Policies[0].Remaining != 4 {
		t.Fatalf("first request of the new period: %+v %v", d, err)
	}
	if w := d.Policies[0].Window; w != s.NextPeriodEnd.Sub(s.PeriodEnd) {
		t.Fatalf("window %v", w)
	}
	if used, ok, _ := st.Used(ctx, "roll", "requests", s.PeriodEnd); !ok || used != 1 {
		t.Fatalf("new period counter %d %v", used, ok)
	}
	if used, _, _ := st.Used(ctx, "roll", "requests", s.PeriodStart); used != 5 {
		t.Fatalf("old period counter changed to %d", used)
	}
}

func TestNearCacheInvalidation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		st := newStore(b.client(), b.prefix)
		s := snapshot("up", func(s *limiter.Snapshot) { s.Plan = "free"; s.Rate = &limiter.Rate{PerSecond: 1, Burst: 5} })
		put(t, st, s)
		var hits atomic.Int64
		l1 := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
		l2 := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Hooks: limiter.Hooks{OnCacheHit: func() { hits.Add(1) }}})
		// Wait until l2 serves from its cache (subscribed and filled).
		limitertest.Eventually(t, 5*time.Second, "cache hits", func() bool {
			_, err := l2.Allow(ctx, "up", limiter.Request{Peek: true})
			return err == nil && hits.Load() > 0
		})
		if d, _ := l1.Allow(ctx, "up", limiter.Request{Peek: true}); d.Plan != "free" {
			t.Fatalf("plan %q", d.Plan)
		}
		s.Version, s.Plan, s.Rate = 2, "team", &limiter.Rate{PerSecond: 10, Burst: 50}
		changed := time.Now()
		put(t, st, s)
		limitertest.Eventually(t, time.Second, "plan change seen by the other limiter", func() bool {
			d, err := l2.Allow(ctx, "up", limiter.Request{Peek: true})
			return err == nil && d.Plan == "team" && d.Policies[0].Limit == 50
		})
		t.Logf("seen after %v", time.Since(changed))
		// An older write arriving late changes nothing.
		old := s
		old.Version, old.Plan = 1, "free"
		put(t, st, old)
		if got, _, _ := st.Snapshot(ctx, "up"); got.Plan != "team" {
			t.Fatalf("stale write won: %+v", got)
		}
	})
}

func TestBadInput(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	st := newStore(b.client(), b.prefix)
	put(t, st, snapshot("t1", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 1}}
	}))
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, MaxCost: 1000})
	for name, c := range map[string]struct {
		tenant string
		req    limiter.Request
	}{
		"negative cost":   {"t1", limiter.Request{Cost: -1}},
		"cost over max":   {"t1", limiter.Request{Cost: 1001}},
		"empty tenant":    {"", limiter.Request{Cost: 1}},
		"brace in tenant": {"a}b", limiter.Request{Cost: 1}},
		"bad meter":       {"t1", limiter.Request{Cost: 1, Meter: "a:b"}},
		"bad window":      {"ip:1", limiter.Request{Cost: 1, Limits: &limiter.Limits{Windows: []limiter.Window{{Name: "x", Limit: 1}}}}},
		"bad rate":        {"ip:1", limiter.Request{Cost: 1, Limits: &limiter.Limits{Rate: &limiter.Rate{}}}},
	} {
		d, err := l.Allow(ctx, c.tenant, c.req)
		if !errors.Is(err, limiter.ErrInvalidRequest) || d != nil {
			t.Errorf("%s: %v %v", name, d, err)
		}
	}
	// An unknown meter has no quota: allowed, nothing counted.
	for i := 0; i < 3; i++ {
		d, err := l.Allow(ctx, "t1", limiter.Request{Cost: 1, Meter: "exports"})
		if err != nil || !d.Allowed || len(d.Policies) != 0 {
			t.Fatalf("unknown meter: %+v %v", d, err)
		}
	}
	if _, err := l.Allow(ctx, "nobody", limiter.Request{Cost: 1}); !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("unknown tenant: %v", err)
	}
}

func TestExplicitLimits(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	st := newStore(b.client(), b.prefix)
	put(t, st, snapshot("ip:192.0.2.1", func(s *limiter.Snapshot) { s.Rate = &limiter.Rate{PerSecond: 1, Burst: 1} }))
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	lim := &limiter.Limits{Windows: []limiter.Window{{Name: "auth-failures", Limit: 5, Length: time.Minute}}, Rate: &limiter.Rate{PerSecond: 100, Burst: 100}}
	for i := 0; i < 7; i++ {
		d, err := l.Allow(ctx, "ip:192.0.2.1", limiter.Request{Cost: 1, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 5) {
			t.Fatalf("#%d %+v", i, d)
		}
		if !d.Allowed && (d.Policy != "auth-failures" || d.RetryAfter <= 0 || d.RetryAfter > 2*time.Minute || d.Plan != "") {
			t.Fatalf("refusal %+v", d)
		}
	}
	// The snapshot of a tenant of the same name keeps its own bucket.
	d, err := l.Allow(ctx, "ip:192.0.2.1", limiter.Request{Cost: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("plan bucket shared with explicit limits: %+v %v", d, err)
	}
}

func TestMiddleware(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	put(t, st, snapshot("mw", func(s *limiter.Snapshot) {
		s.Plan = "free"
		s.Rate = &limiter.Rate{PerSecond: 0.01, Burst: 2}
		s.Concurrency = 1
	}))
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	var inHandler atomic.Int64
	h := limithttp.Middleware(l, func(r *http.Request) (string, limiter.Request, error) {
		return r.Header.Get("X-Tenant"), limiter.Request{Cost: 1, Concurrency: true}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		if _, ok := limithttp.DecisionFromContext(r.Context()); !ok {
			t.Error("no decision in context")
		}
		w.WriteHeader(204)
	}))
	do := func(tenant string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("X-Tenant", tenant)
		h.ServeHTTP(rec, req)
		return rec
	}
	for i, want := range []int{204, 204, 429} {
		rec := do("mw")
		if rec.Code != want {
			t.Fatalf("#%d: %d %s", i, rec.Code, rec.Body)
		}
		if !strings.Contains(rec.Header().Get("RateLimit-Policy"), `"rate";q=2`) {
			t.Fatalf("headers %v", rec.Header())
		}
		if want == 429 && (rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"plan":"free"`)) {
			t.Fatalf("refusal %v %s", rec.Header(), rec.Body)
		}
	}
	if inHandler.Load() != 2 {
		t.Fatalf("handler ran %d times", inHandler.Load())
	}
	if rec := do("a{b"); rec.Code != 400 {
		t.Fatalf("bad tenant: %d", rec.Code)
	}
	if rec := do("ghost"); rec.Code != 401 || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("unknown tenant: %d, WWW-Authenticate %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
}

// A plan upgrade applies at once: debt run up under a slow rate (its GCRA
// arrival time far in the future) must not keep refusing at the new rate,
// even though refusals write nothing.
func TestRateUpgradeDropsOldDebt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		st := newStore(b.client(), b.prefix)
		put(t, st, snapshot("upg", func(s *limiter.Snapshot) { s.Rate = &limiter.Rate{PerSecond: 0.01, Burst: 2} }))
		l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, DisableRefusalCache: true, Timeout: 2 * time.Second})
		for i := 0; i < 2; i++ {
			if d, err := l.Allow(ctx, "upg", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("within burst: %+v %v", d, err)
			}
		}
		if d, err := l.Allow(ctx, "upg", limiter.Request{Cost: 1}); err != nil || d.Allowed || d.RetryAfter < 50*time.Second {
			t.Fatalf("over the slow burst: want a long refusal, got %+v %v", d, err)
		}
		put(t, st, snapshot("upg", func(s *limiter.Snapshot) {
			s.Version = 2
			s.Rate = &limiter.Rate{PerSecond: 50, Burst: 50}
		}))
		admitted := 0
		limitertest.Eventually(t, time.Second, "admitted again at 50/s", func() bool {
			d, err := l.Allow(ctx, "upg", limiter.Request{Cost: 1})
			if err == nil && d.Allowed {
				admitted++
			}
			return admitted >= 5
		})
		// The bucket restarts empty at the new rate: no fresh burst of 50.
		if d, err := l.Allow(ctx, "upg", limiter.Request{Peek: true}); err != nil || d.Policies[0].Remaining > 10 {
			t.Fatalf("after upgrade the bucket should refill at the new rate, not start full: %+v %v", d, err)
		}
	})
}
