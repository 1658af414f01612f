package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
)

// windowPlan is a snapshot whose rate and quota are plentiful, so that
// only its windows refuse.
func windowPlan(tenant string, ws ...limiter.Window) limiter.Snapshot {
	return snapshot(tenant, func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 1e6, Burst: 1e6}
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 1 << 40, Mode: limiter.ModeHard}}
		s.Windows = ws
	})
}

// redisMs is Redis's clock in milliseconds, the clock windows count by.
func redisMs(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// waitWindow polls Redis's clock until a window of length ms at least
// 50 ms old and at most half over begins k windows after the one now, and
// returns its index. Polling, not sleeping for a window: the wait ends as
// soon as Redis's clock says so.
func waitWindow(t *testing.T, rdb redis.UniversalClient, length int64, k int64) int64 {
	t.Helper()
	start := redisMs(t, rdb) / length
	deadline := time.Now().Add(time.Duration(k+2) * time.Duration(length) * time.Millisecond * 3)
	for time.Now().Before(deadline) {
		now := redisMs(t, rdb)
		idx, el := now/length, now%length
		if idx >= start+k && el >= 50 && el < length/2 {
			return idx
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("Redis's clock did not reach window %d+%d", start, k)
	return 0
}

// burst sends n requests from each of workers goroutines per limiter and
// returns how many were admitted.
func burst(t *testing.T, tenant string, ls []*limiter.Limiter, workers, n int) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(ls)*workers)
	for _, l := range ls {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < n; i++ {
					d, err := l.Allow(context.Background(), tenant, limiter.Request{Cost: 1})
					if err != nil {
						errs <- err
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

// exactInWindow runs burst in the window waitWindow finds k windows on,
// again when the burst spilled into the next window (a starved machine),
// and returns what was admitted.
func exactInWindow(t *testing.T, rdb redis.UniversalClient, length, k int64, run func() int64) int64 {
	t.Helper()
	for attempt := 0; ; attempt++ {
		idx := waitWindow(t, rdb, length, k)
		got := run()
		if redisMs(t, rdb)/length == idx || attempt >= 4 {
			return got
		}
		// spilled into the next window (a starved machine): again, k
		// windows on, where the spilled counts weigh nothing
	}
}

// TestPlanFixedWindowExact: a plan's fixed window of L admits exactly L in
// one window across two limiters and many goroutines (one script decides
// and takes every policy), and re-arms in the next window by Redis's clock.
func TestPlanFixedWindowExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const L, length = 25, 2000
		rdb := b.client()
		st := newStore(rdb, b.prefix)
		put(t, st, windowPlan("fw", limiter.Window{Name: "per-2s", Limit: L, Length: length * time.Millisecond, Kind: limiter.WindowFixed}))
		ls := []*limiter.Limiter{
			newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second}),
			newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second}),
		}
		for round := 0; round < 2; round++ {
			got := exactInWindow(t, rdb, length, 1, func() int64 { return burst(t, "fw", ls, 8, 10) })
			if got != L {
				t.Fatalf("round %d: a fixed window of %d admitted %d in one window", round, L, got)
			}
		}
		d, err := ls[0].Allow(context.Background(), "fw", limiter.Request{Cost: 1})
		if err != nil || d.Allowed || d.Policy != "per-2s" {
			t.Fatalf("after the window's %d: %+v %v", L, d, err)
		}
		if d.RetryAfter <= 0 || d.RetryAfter > length*time.Millisecond {
			t.Errorf("retry after %v, want the rest of the window", d.RetryAfter)
		}
		w := d.Policies[1]
		if w.Name != "per-2s" || w.Limit != L || w.Window != length*time.Millisecond || w.Remaining != 0 {
			t.Errorf("window policy %+v", w)
		}
		if ttl := rdb.PTTL(context.Background(), b.prefix+":{t:fw}:pf:per-2s:2000").Val(); ttl <= 0 || ttl > length*time.Millisecond {
			t.Errorf("the fixed window's key lives %v, want until the window's end", ttl)
		}
	})
}

// TestPlanSlidingWindowExact: a plan's sliding window admits exactly L in
// a window that follows none, across two limiters, and again once a
// whole window has passed with nothing counted; in between, the two
// windows' weighted estimate holds it back.
func TestPlanSlidingWindowExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const L, length = 25, 1500
		rdb := b.client()
		st := newStore(rdb, b.prefix)
		put(t, st, windowPlan("sw", limiter.Window{Name: "per-1500ms", Limit: L, Length: length * time.Millisecond}))
		ls := []*limiter.Limiter{
			newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second}),
			newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second}),
		}
		for round := 0; round < 2; round++ {
			got := exactInWindow(t, rdb, length, 2, func() int64 { return burst(t, "sw", ls, 8, 10) })
			if got != L {
				t.Fatalf("round %d: a sliding window of %d admitted %d", round, L, got)
			}
		}
		// The window right after a full one: the estimate still counts
		// most of the previous window, so far fewer than L get in.
		waitWindow(t, rdb, length, 1)
		if got := burst(t, "sw", ls, 4, 10); got >= L {
			t.Errorf("the window after a full one admitted %d of %d", got, L)
		}
	})
}

// TestPlanWindowsRefuseTakingNothing: a request a window refuses takes
// nothing from the rate, the quota or another window, and one the quota
// refuses takes nothing from the windows.
func TestPlanWindowsRefuseTakingNothing(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	put(t, st, snapshot("wr", func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 1, Burst: 100}
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 100, Mode: limiter.ModeHard}}
		s.Windows = []limiter.Window{
			{Name: "hourly", Limit: 5, Length: time.Hour, Kind: limiter.WindowFixed},
			{Name: "daily", Limit: 50, Length: 24 * time.Hour},
		}
	}))
	l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, DisableRefusalCache: true})
	for i := 0; i < 5; i++ {
		if d, err := l.Allow(ctx, "wr", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	d, err := l.Allow(ctx, "wr", limiter.Request{Cost: 1})
	if err != nil || d.Allowed || d.Policy != "hourly" {
		t.Fatalf("the sixth in an hour of 5: %+v %v", d, err)
	}
	names := []string{}
	for _, p := range d.Policies {
		names = append(names, p.Name)
	}
	if fmt.Sprint(names) != "[rate hourly daily requests]" {
		t.Errorf("policies %v, want the rate, the windows in order, then the quota", names)
	}
	if rem := d.Policies[2].Remaining; rem != 45 {
		t.Errorf("daily has %d left after a refusal, want 45", rem)
	}
	if rem := d.Policies[3].Remaining; rem != 95 {
		t.Errorf("the quota has %d left after a refusal, want 95", rem)
	}
	if r := d.Policies[0].Remaining; r != 95 {
		t.Errorf("the bucket has %d left after a refusal, want 95", r)
	}
	// A cost over the whole limit of a window is refused, taking nothing.
	if d, err := l.Allow(ctx, "wr", limiter.Request{Cost: 60}); err != nil || d.Allowed {
		t.Fatalf("cost 60: %+v %v", d, err)
	}
	if d, err := l.Allow(ctx, "wr", limiter.Request{Cost: 1, Peek: true}); err != nil || d.Policies[2].Remaining != 45 {
		t.Fatalf("peek: %+v %v", d, err)
	}
}

// TestPlanWindowsBatched: the batching mode pipelines the same script,
// windows and all: still exactly L.
func TestPlanWindowsBatched(t *testing.T) {
	b := singleRedis(t)
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	put(t, st, windowPlan("wb", limiter.Window{Name: "hourly", Limit: 30, Length: time.Hour, Kind: limiter.WindowFixed}))
	ls := []*limiter.Limiter{
		newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Batching: true, Timeout: 5 * time.Second}),
		newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Batching: true, Timeout: 5 * time.Second}),
	}
	if got := burst(t, "wb", ls, 8, 10); got != 30 {
		t.Fatalf("batched: a window of 30 admitted %d", got)
	}
}

// TestPlanWindowsByReference: a tenant missing from the near-cache is
// decided by reference (the limits hash) with its windows, in one trip,
// exactly as a cached one.
func TestPlanWindowsByReference(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rdb := b.client()
		st := newStore(rdb, b.prefix)
		put(t, st, windowPlan("wref", limiter.Window{Name: "hourly", Limit: 20, Length: time.Hour, Kind: limiter.WindowFixed},
			limiter.Window{Name: "minute", Limit: 15, Length: time.Minute}))
		put(t, st, snapshot("wref-fill", nil))
		writer := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second})
		peek(t, writer, "wref") // writes the limits hash
		var trips atomic.Int64
		opts := limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, CacheSize: 1, DisableRefusalCache: true}
		opts.Hooks.OnCacheMiss = func() { trips.Add(1) }
		ls := []*limiter.Limiter{newLimiter(t, b.client(), opts), newLimiter(t, b.client(), opts)}
		for _, l := range ls {
			peek(t, l, "wref-fill") // the near-cache is full: wref goes by reference
		}
		if got := burst(t, "wref", ls, 4, 10); got != 15 {
			t.Fatalf("by reference: a minute window of 15 admitted %d", got)
		}
		if trips.Load() == 0 {
			t.Fatal("no decision went by reference")
		}
		d, err := ls[0].Allow(ctx, "wref", limiter.Request{Cost: 1})
		if err != nil || d.Allowed || d.Policy != "minute" {
			t.Fatalf("%+v %v", d, err)
		}
		if p := d.Policies[1]; p.Name != "hourly" || p.Limit != 20 || p.Remaining != 5 || p.Window != time.Hour {
			t.Errorf("hourly by reference: %+v", p)
		}
		if l := limiter.RefShapes(ls[0]); l < 1 {
			t.Errorf("%d shapes", l)
		}
	})
}

// TestPlanWindowsLeased: in the leased mode a plan's windows are taken in
// chunks like the rate; one instance admits exactly L in a fixed window
// (a refused take takes what is left), two never more than L, and no lease
// carries units into the next window: each window admits at most L again.
func TestPlanWindowsLeased(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const L, length = 40, 2000
		rdb := b.client()
		st := newStore(rdb, b.prefix)
		put(t, st, windowPlan("wl1", limiter.Window{Name: "per-2s", Limit: L, Length: length * time.Millisecond, Kind: limiter.WindowFixed}))
		put(t, st, windowPlan("wl2", limiter.Window{Name: "per-2s", Limit: L, Length: length * time.Millisecond, Kind: limiter.WindowFixed}))
		opts := limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, Prefetch: true}
		one := newLimiter(t, b.client(), opts)
		got := exactInWindow(t, rdb, length, 1, func() int64 { return burst(t, "wl1", []*limiter.Limiter{one}, 1, 2*L) })
		if got != L {
			t.Fatalf("one leased instance admitted %d in a window of %d", got, L)
		}
		two := []*limiter.Limiter{newLimiter(t, b.client(), opts), newLimiter(t, b.client(), opts)}
		for round := 0; round < 3; round++ {
			got := exactInWindow(t, rdb, length, 1, func() int64 { return burst(t, "wl2", two, 4, 20) })
			if got > L || got < L/2 {
				t.Fatalf("round %d: two leased instances admitted %d in a window of %d", round, got, L)
			}
		}
	})
}

// TestPlanWindowsLeasedAreLocalWithinTheirWindow: decisions on a plan
// with windows are leased (most need no Redis trip), and a lease ends with
// the window: the first decision in the next window goes to Redis, where
// a lease taken in the window before would otherwise have admitted it
// uncounted.
func TestPlanWindowsLeasedAreLocalWithinTheirWindow(t *testing.T) {
	b := singleRedis(t)
	const length = 2000
	l, rt, st := counted(t, b, limiter.Options{Timeout: 5 * time.Second, Prefetch: true, DisableRefusalCache: true})
	put(t, st, windowPlan("wll", limiter.Window{Name: "per-2s", Limit: 100000, Length: length * time.Millisecond, Kind: limiter.WindowFixed}))
	rdb := b.client()
	ctx := context.Background()
	waitWindow(t, rdb, length, 1)
	before := rt.n.Load()
	const n = 400
	for i := 0; i < n; i++ {
		if d, err := l.Allow(ctx, "wll", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	if trips := rt.n.Load() - before; trips > n/4 {
		t.Fatalf("%d round trips for %d leased decisions", trips, n)
	}
	waitWindow(t, rdb, length, 1)
	before = rt.n.Load()
	if d, err := l.Allow(ctx, "wll", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if rt.n.Load() == before {
		t.Fatal("the first decision of a new window was admitted from a lease taken in the window before")
	}
}

// TestPlanWindowsLocalFallback: with Redis gone, a plan window in the
// local fail mode is held in process to its limit divided among the
// instances (a bucket of that size refilled over the window's length),
// never admitted unchecked.
func TestPlanWindowsLocalFallback(t *testing.T) {
	srv := startPrivate(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	st := newStore(rdb, "")
	put(t, st, windowPlan("wfb", limiter.Window{Name: "hourly", Limit: 6, Length: time.Hour, Kind: limiter.WindowFixed}))
	l := newLimiter(t, rdb, limiter.Options{
		Timeout: 50 * time.Millisecond, Cooldown: time.Hour, ExpectedInstances: 2,
		FailMode: limiter.FailModes{Rate: limiter.FailLocal, Quota: limiter.FailLocal, Window: limiter.FailLocal},
	})
	if d, err := l.Allow(ctx, "wfb", limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Fallback != "" {
		t.Fatalf("%+v %v", d, err)
	}
	srv.Kill()
	admitted := 0
	var last *limiter.Decision
	for i := 0; i < 20; i++ {
		d, err := l.Allow(ctx, "wfb", limiter.Request{Cost: 1})
		if err != nil || d.Fallback != limiter.FailLocal {
			t.Fatalf("%+v %v", d, err)
		}
		if d.Allowed {
			admitted++
		}
		last = d
	}
	if admitted != 3 {
		t.Fatalf("admitted %d in the local mode against a window of 6 over 2 instances, want 3", admitted)
	}
	if last.Policy != "hourly" || last.RetryAfter <= 0 {
		t.Fatalf("refused by %q, retry after %v", last.Policy, last.RetryAfter)
	}
}

// TestPlanWindowsReserveAndSettle: a reservation's estimate is taken from
// the windows as from the rate and the quota, and one the window cannot
// hold is refused taking nothing; settling adjusts the quota to the actual
// cost and leaves the windows charged at the estimate, as the token bucket
// is.
func TestPlanWindowsReserveAndSettle(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rdb := b.client()
		st := newStore(rdb, b.prefix)
		put(t, st, snapshot("wrs", func(s *limiter.Snapshot) {
			s.Rate = &limiter.Rate{PerSecond: 1e6, Burst: 1e6}
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: 1000, Mode: limiter.ModeHard}}
			s.Windows = []limiter.Window{{Name: "hourly", Limit: 10, Length: time.Hour, Kind: limiter.WindowFixed}}
		}))
		l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, DisableRefusalCache: true})
		d, err := l.Allow(ctx, "wrs", limiter.Request{Cost: 8, Reserve: true})
		if err != nil || !d.Allowed || d.Reservation == nil || d.Policies[1].Remaining != 2 {
			t.Fatalf("reserve 8: %+v %v", d, err)
		}
		if d, err := l.Allow(ctx, "wrs", limiter.Request{Cost: 3, Reserve: true}); err != nil || d.Allowed || d.Policy != "hourly" || d.Reservation != nil {
			t.Fatalf("reserve 3 with 2 left in the window: %+v %v", d, err)
		}
		if est, err := l.Settle(ctx, "wrs", d.Reservation.ID, 2); err != nil || est != 8 {
			t.Fatalf("settle: %d %v", est, err)
		}
		p, err := l.Allow(ctx, "wrs", limiter.Request{Cost: 1, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		if w, q := p.Policies[1], p.Policies[2]; w.Remaining != 2 || q.Remaining != 998 {
			t.Fatalf("after settling 8 as 2: window %d left (want 2), quota %d left (want 998)", w.Remaining, q.Remaining)
		}
	})
}
