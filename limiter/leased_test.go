package limiter_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// The prefetch mode (Options.Prefetch): units taken from Redis in chunks,
// decided locally. These tests mirror the team perf kit's leasecheck tool (built with
// -tags tollgatelease against the same API) at a size fit for a test run.

// leaseOpts are leased options whose Redis calls survive a loaded test
// machine: a fallback would admit without counting and blur the figures.
func leaseOpts(b *backend, fallbacks *atomic.Int64, snap func(string) limiter.Snapshot) limiter.Options {
	return limiter.Options{
		Prefix: b.prefix, Timeout: 5 * time.Second, Prefetch: true,
		Loader: func(_ context.Context, tenant string) (limiter.Snapshot, error) { return snap(tenant), nil },
		Hooks:  limiter.Hooks{OnFallback: func(string, limiter.FailMode) { fallbacks.Add(1) }},
	}
}

// pound runs goroutines on each limiter until d has passed (or stop says
// so) and returns what was admitted and how long it took.
func pound(ls []*limiter.Limiter, tenant string, goroutines int, d time.Duration) (admitted int64, elapsed time.Duration) {
	var a atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range ls {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < d {
					dec, err := l.Allow(context.Background(), tenant, limiter.Request{Cost: 1})
					if err == nil && dec.Allowed {
						a.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	return a.Load(), time.Since(start)
}

func leaseSnap(rate limiter.Rate, quota int64) func(string) limiter.Snapshot {
	return func(tenant string) limiter.Snapshot {
		return snapshot(tenant, func(s *limiter.Snapshot) {
			s.Rate = &rate
			if quota > 0 {
				s.Quotas = map[string]limiter.Quota{"requests": {Limit: quota, Mode: limiter.ModeHard}}
			}
		})
	}
}

// used reads what Redis counts of the tenant's quota with an exact peek.
func used(t *testing.T, l *limiter.Limiter, tenant string, limit int64) int64 {
	t.Helper()
	d, err := l.Allow(context.Background(), tenant, limiter.Request{Cost: 1, Peek: true})
	if err != nil || d.Fallback != "" {
		t.Fatalf("peek: %+v %v", d, err)
	}
	for _, p := range d.Policies {
		if p.Name == "requests" {
			return limit - p.Remaining
		}
	}
	t.Fatalf("no quota in %+v", d.Policies)
	return 0
}

// Four leased instances on one hard quota never admit more than it, and
// once their leases are given back (Close) a fresh instance takes the rest:
// exactly the quota in all. On one node and on a 3-node Cluster.
func TestLeasedQuotaExactAcrossInstances(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const quota = 3000
		var fallbacks atomic.Int64
		snap := leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, quota)
		opts := leaseOpts(b, &fallbacks, snap)
		var ls []*limiter.Limiter
		for i := 0; i < 4; i++ {
			l, err := limiter.New(b.client(), opts)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		adm, _ := pound(ls, "q", 8, 1500*time.Millisecond)
		if adm > quota {
			t.Fatalf("4 instances admitted %d of a quota of %d", adm, quota)
		}
		for _, l := range ls {
			l.Close()
		}
		fresh := newLimiter(t, b.client(), opts)
		rest, _ := pound([]*limiter.Limiter{fresh}, "q", 8, 500*time.Millisecond)
		if fallbacks.Load() != 0 {
			t.Fatalf("%d decisions fell back (Redis too slow for this machine's load)", fallbacks.Load())
		}
		if adm+rest != quota {
			t.Fatalf("admitted %d, then %d after the leases went back: %d, want exactly %d", adm, rest, adm+rest, quota)
		}
		exact := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Loader: opts.Loader, DisableRefusalCache: true})
		if u := used(t, exact, "q", quota); u != quota {
			t.Fatalf("Redis counts %d used, want %d", u, quota)
		}
	})
}

// On a token bucket without quota, 4 leased instances admit no more than
// the bucket allows (burst + rate × elapsed) and waste little of it.
func TestLeasedRateBound(t *testing.T) {
	b := singleRedis(t)
	var fallbacks atomic.Int64
	opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1000, Burst: 1000}, 0))
	var ls []*limiter.Limiter
	for i := 0; i < 4; i++ {
		ls = append(ls, newLimiter(t, b.client(), opts))
	}
	adm, el := pound(ls, "r", 8, 2*time.Second)
	bound := 1000 + 1000*el.Seconds()
	t.Logf("admitted %d in %v: %.1f%% of the bound %.0f", adm, el, 100*float64(adm)/bound, bound)
	if float64(adm) > bound+1 {
		t.Fatalf("admitted %d, over the bucket's %.0f", adm, bound)
	}
	// leasecheck holds 90% on a quiet machine; a test run shares the CPU.
	if float64(adm) < 0.8*bound {
		t.Fatalf("admitted %d, under 80%% of the bucket's %.0f", adm, bound)
	}
}

// background says that cmd is not a decision's: the limiter's own
// once-a-second heartbeat (instances.go), or go-redis setting up a new
// connection (HELLO, CLIENT SETINFO), which a pool does whenever a
// loaded machine keeps a connection busy a little longer.
func background(cmd redis.Cmder) bool {
	if n := cmd.Name(); n == "hello" || n == "client" {
		return true
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, ":instances") {
			return true
		}
	}
	return false
}

// countingHook counts the commands a client sends (not the heartbeat).
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !background(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !background(c) {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// Leased decisions are local: a busy tenant costs a few takes, not a
// round trip per decision; and what a decision reports is what exact mode
// would: the quota's remaining counts down one by one on one instance.
func TestLeasedDecisionsAreLocal(t *testing.T) {
	b := singleRedis(t)
	var fallbacks atomic.Int64
	opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, 100000))
	rdb := b.client()
	hook := &countingHook{}
	rdb.AddHook(hook)
	l := newLimiter(t, rdb, opts)
	ctx := context.Background()
	before := hook.n.Load()
	const n = 2000
	for i := int64(1); i <= n; i++ {
		d, err := l.Allow(ctx, "local", limiter.Request{Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
		q := d.Policies[len(d.Policies)-1]
		if q.Name != "requests" || q.Remaining != 100000-i || q.Limit != 100000 || q.Reset <= 0 {
			t.Fatalf("decision %d: quota status %+v, want remaining %d", i, q, 100000-i)
		}
		if r := d.Policies[0]; r.Name != "rate" || r.Remaining < 1e6-i || r.Limit != 1e6 {
			t.Fatalf("decision %d: rate status %+v", i, r)
		}
	}
	if trips := hook.n.Load() - before; trips > n/20 {
		t.Fatalf("%d Redis calls for %d leased decisions, want under %d", trips, n, n/20)
	}
}

// A holder that stops deciding gives its unused units back once its lease
// has been idle for its life (10 s on plentiful limits): Redis then counts
// exactly what was admitted.
func TestLeasedExpiryGivesUnitsBack(t *testing.T) {
	b := singleRedis(t)
	var fallbacks atomic.Int64
	opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, 100000))
	l := newLimiter(t, b.client(), opts)
	exact := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Loader: opts.Loader, DisableRefusalCache: true})
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		if d, err := l.Allow(ctx, "idle", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if u := used(t, exact, "idle", 100000); u <= 200 {
		t.Fatalf("Redis counts %d used after 200 leased decisions: no units held ahead", u)
	}
	limitertest.Eventually(t, 15*time.Second, "the idle lease's units back in Redis", func() bool {
		return used(t, exact, "idle", 100000) == 200
	})
}

// A plan change revokes the leases at once: the units held go back within
// a second without another decision, and the lower limit holds.
func TestLeasedRevokedOnPlanChange(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	// A quota so large that the lease is long-lived (2s): only the
	// revocation brings its units back within a second.
	const big = 10_000_000
	s1 := leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, big)("plan")
	put(t, st, s1)
	var fallbacks atomic.Int64
	opts := limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Prefetch: true,
		Hooks: limiter.Hooks{OnFallback: func(string, limiter.FailMode) { fallbacks.Add(1) }}}
	l := newLimiter(t, b.client(), opts)
	// The reader's refusal cache would keep answering a refused peek.
	exact := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, DisableRefusalCache: true})
	ctx := context.Background()
	for i := 0; i < 41; i++ {
		if d, err := l.Allow(ctx, "plan", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if u := used(t, exact, "plan", big); u <= 41 {
		t.Fatalf("Redis counts %d used after 41 leased decisions: no units held ahead", u)
	}
	s2 := s1
	s2.Version = 2
	s2.Quotas = map[string]limiter.Quota{"requests": {Limit: 45, Mode: limiter.ModeHard}}
	put(t, st, s2)
	// The lease would live 2s: back within 1s means the invalidation revoked it.
	limitertest.Eventually(t, time.Second, "the revoked lease's units back in Redis", func() bool {
		return used(t, exact, "plan", 45) == 41
	})
	admitted := 0
	for i := 0; i < 100; i++ {
		d, err := l.Allow(ctx, "plan", limiter.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		} else if d.Policy != "requests" {
			t.Fatalf("refused by %q", d.Policy)
		}
	}
	if admitted != 4 {
		t.Fatalf("admitted %d after the quota went down to 45 with 41 used, want 4", admitted)
	}
}

// Refusals in the leased mode are counted as in exact mode: one per refused
// request, none for a chunk the leases asked for and did not get.
func TestLeasedRefusalsCountedAsExact(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	var fallbacks atomic.Int64
	opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, 30))
	l := newLimiter(t, b.client(), opts)
	ctx := context.Background()
	admitted, refused := 0, 0
	for i := 0; i < 50; i++ {
		d, err := l.Allow(ctx, "refuse", limiter.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
			continue
		}
		refused++
		if d.Policy != "requests" || d.RetryAfter <= 0 || d.Policies[1].Remaining != 0 {
			t.Fatalf("refusal %+v", d)
		}
	}
	if admitted != 30 || refused != 20 {
		t.Fatalf("admitted %d, refused %d; want 30 and 20", admitted, refused)
	}
	if err := limiter.FlushRefusals(l, ctx); err != nil {
		t.Fatal(err)
	}
	rf, err := st.Refusals(ctx, "refuse", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rf["requests"] != 20 {
		t.Fatalf("refusals counted %v, want requests: 20", rf)
	}
}

// When Redis dies, a lease already held decides until it runs out or
// expires (it was taken in Redis); then the fail modes decide as in exact
// mode (closed: 503).
func TestLeasedRedisLoss(t *testing.T) {
	for _, mode := range []limiter.FailMode{limiter.FailClosed, limiter.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startPrivate(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			snap := leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, 100000)
			l := newLimiter(t, rdb, limiter.Options{
				Timeout: 50 * time.Millisecond, Cooldown: 20 * time.Millisecond, Prefetch: true,
				FailMode: limiter.FailModes{Rate: mode, Quota: mode},
				Loader:   func(_ context.Context, tenant string) (limiter.Snapshot, error) { return snap(tenant), nil },
			})
			ctx := context.Background()
			for i := 0; i < 100; i++ {
				if d, err := l.Allow(ctx, "lost", limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Fallback != "" {
					t.Fatalf("before: %+v %v", d, err)
				}
			}
			srv.Kill()
			// The lease held decides first, without Redis.
			if d, err := l.Allow(ctx, "lost", limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Fallback != "" {
				t.Fatalf("from the held lease: %+v %v", d, err)
			}
			// A plentiful lease lives 10 s past its last use: spend it. Every
			// decision is local (from the lease) or the fail mode's.
			limitertest.Eventually(t, 5*time.Second, "the fail mode deciding once the lease is spent", func() bool {
				for i := 0; i < 100; i++ {
					start := time.Now()
					d, err := l.Allow(ctx, "lost", limiter.Request{Cost: 1})
					if took := time.Since(start); took > time.Second {
						t.Fatalf("a decision took %v with Redis down", took)
					}
					if err == nil && d.Allowed && d.Fallback == "" {
						continue // from the lease held
					}
					switch mode {
					case limiter.FailClosed:
						return errors.Is(err, limiter.ErrUnavailable)
					default:
						return err == nil && d.Allowed && d.Fallback == limiter.FailOpen
					}
				}
				return false
			})
			// Close does not hang on a dead Redis (its returns are bounded).
			start := time.Now()
			l.Close()
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("Close took %v with Redis down", took)
			}
		})
	}
}

// A holder that dies without Close strands at most its chunk, a quarter of
// the limit (ExpectedInstances 1): charged in Redis, never admitted. Its
// client is closed here, so nothing it holds can go back.
func TestLeasedCrashStrandsAtMostAChunk(t *testing.T) {
	b := singleRedis(t)
	var fallbacks atomic.Int64
	const quota = 1000
	opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, quota))
	rdb := b.client()
	l := newLimiter(t, rdb, opts)
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if d, err := l.Allow(ctx, "crash", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	rdb.Close()
	exact := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Loader: opts.Loader, DisableRefusalCache: true})
	u := used(t, exact, "crash", quota)
	if u <= 100 || u-100 > quota/4 {
		t.Fatalf("Redis counts %d used after 100 admitted: %d stranded, want 1 to %d", u, u-100, quota/4)
	}
}

// A tenant seen every couple of seconds keeps its lease on plentiful
// limits (a lease lives leaseIdle, 10 s, after its last use): no units go
// back between its bursts, and the take after the first holds enough for
// all of them, so its later bursts cost no Redis call at all instead of a
// take and a return each.
func TestLeasedPlentifulLeaseOutlivesPauses(t *testing.T) {
	b := singleRedis(t)
	var fallbacks atomic.Int64
	opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, 1<<40))
	rdb := b.client()
	hook := &countingHook{}
	rdb.AddHook(hook)
	l := newLimiter(t, rdb, opts)
	ctx := context.Background()
	var before int64
	for burst := 0; burst < 3; burst++ {
		if burst > 0 {
			time.Sleep(2500 * time.Millisecond) // past the 2 s life leases had
		} else {
			before = hook.n.Load()
		}
		for i := 0; i < 10; i++ {
			if d, err := l.Allow(ctx, "pauses", limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Fallback != "" {
				t.Fatalf("burst %d decision %d: %+v %v", burst, i, d, err)
			}
		}
		if burst == 0 {
			// The snapshot's reads, a take of 1, then one of 64.
			t.Logf("first burst: %d Redis calls", hook.n.Load()-before)
			before = hook.n.Load()
		}
	}
	if n := hook.n.Load() - before; n != 0 {
		t.Fatalf("%d Redis calls for 2 bursts of 10 decisions 2.5 s apart, want none (the lease held lives on)", n)
	}
	exact := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Loader: opts.Loader, DisableRefusalCache: true})
	if u := used(t, exact, "pauses", 1<<40); u != 1+64 {
		t.Fatalf("Redis counts %d used, want 65 (a take of 1, then one of 64)", u)
	}
}

// Remainders go back in pipelines, one script call each: Close of an
// instance holding leases of 300 tenants makes a few round trips, not a
// reservation and a cancel per tenant; and Redis then counts exactly what
// was admitted, on one node and on a Cluster (the pipeline split per node).
func TestLeasedReturnsArePipelined(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var fallbacks atomic.Int64
		const quota = 1 << 40
		opts := leaseOpts(b, &fallbacks, leaseSnap(limiter.Rate{PerSecond: 1e6, Burst: 1e6}, quota))
		rdb := b.client()
		hook := &countingHook{}
		rdb.AddHook(hook)
		l, err := limiter.New(rdb, opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const tenants = 300
		tenant := func(i int) string { return "ret" + strconv.Itoa(i) }
		for i := 0; i < tenants; i++ {
			for j := 0; j < 3; j++ { // a take of 1, then one of 64 with 63 left
				if d, err := l.Allow(ctx, tenant(i), limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Fallback != "" {
					t.Fatalf("%+v %v", d, err)
				}
			}
		}
		before := hook.n.Load()
		l.Close()
		if n := hook.n.Load() - before; n > 10 {
			t.Fatalf("Close made %d Redis calls to give back the leases of %d tenants, want a few pipelines", n, tenants)
		}
		exact := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Loader: opts.Loader, DisableRefusalCache: true})
		for i := 0; i < tenants; i++ {
			if u := used(t, exact, tenant(i), quota); u != 3 {
				t.Fatalf("tenant %d: Redis counts %d used after 3 admitted and Close, want 3", i, u)
			}
		}
	})
}
