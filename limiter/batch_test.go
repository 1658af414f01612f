package limiter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

func TestBatchingExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ls, st := fleet(t, b, limiter.Options{Timeout: 2 * time.Second, Batching: true})
		s := snapshot("batched", func(s *limiter.Snapshot) {
			s.Rate = &limiter.Rate{PerSecond: 0.001, Burst: 1000}
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: 73}}
		})
		put(t, st, s)
		var admitted atomic.Int64
		hammer(ls, 2, func(l *limiter.Limiter, _, _ int) {
			d, err := l.Allow(context.Background(), "batched", limiter.Request{Cost: 1})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
		if used, _, _ := st.Used(context.Background(), "batched", "requests", s.PeriodStart); admitted.Load() != 73 || used != 73 {
			t.Fatalf("admitted %d, counter %d, want 73", admitted.Load(), used)
		}
	})
}

// TestBatchingAddsNoWait: natural batching has no collection window: an
// alone decision is sent at once as a plain EVALSHA, whatever the Batching
// value (with the old fixed window, an hour would have blocked it).
func TestBatchingAddsNoWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, rt, st := counted(t, b, limiter.Options{Timeout: 2 * time.Second, Batching: true})
		put(t, st, rateQuota("alone"))
		ctx := context.Background()
		if _, err := l.Allow(ctx, "alone", limiter.Request{Cost: 1}); err != nil {
			t.Fatal(err)
		}
		before, pipes := rt.n.Load(), rt.count("pipeline")
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			for i := 0; i < 20; i++ {
				if _, err := l.Allow(ctx, "alone", limiter.Request{Cost: 1}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("20 sequential batched decisions took over 10s: a decision waited for others")
		}
		t.Logf("20 sequential decisions in %v", time.Since(start))
		if got := rt.n.Load() - before; got != 20 {
			t.Errorf("%d round trips for 20 sequential decisions, want 20", got)
		}
		if got := rt.count("pipeline") - pipes; got != 0 {
			t.Errorf("%d pipelines for sequential decisions, want plain EVALSHAs", got)
		}
	})
}

// TestBatchingSharesRoundTrips: concurrent decisions ride on shared
// pipelines, fewer round trips than decisions, and each gets its own reply.
func TestBatchingSharesRoundTrips(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, rt, st := counted(t, b, limiter.Options{Timeout: 2 * time.Second, Batching: true})
		const tenants, callers, calls = 8, 64, 20
		names := make([]string, tenants)
		for i := range names {
			names[i] = "share-" + string(rune('a'+i))
			s := rateQuota(names[i])
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: int64(callers * calls / tenants)}}
			put(t, st, s)
			if _, err := l.Allow(context.Background(), names[i], limiter.Request{Peek: true}); err != nil {
				t.Fatal(err)
			}
		}
		before := rt.n.Load()
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < calls; i++ {
					d, err := l.Allow(context.Background(), names[(c+i)%tenants], limiter.Request{Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		trips := rt.n.Load() - before
		if admitted.Load() != callers*calls {
			t.Errorf("admitted %d of %d, each tenant's quota fits exactly", admitted.Load(), callers*calls)
		}
		for _, n := range names {
			if used, _, _ := st.Used(context.Background(), n, "requests", snapshot(n, nil).PeriodStart); used != callers*calls/tenants {
				t.Errorf("%s used %d, want %d", n, used, callers*calls/tenants)
			}
		}
		if trips >= callers*calls {
			t.Errorf("%d round trips for %d concurrent decisions: nothing was batched", trips, callers*calls)
		}
		t.Logf("%d decisions in %d round trips", callers*calls, trips)
	})
}
