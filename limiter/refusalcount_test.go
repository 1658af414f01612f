package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// Refusals answered from the local refusal cache never reach Redis in the
// decision itself; they must still be counted, or the dashboard shows 1 of
// 18 refusals.
func TestCachedRefusalsAreCounted(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rdb := b.client()
		st := newStore(rdb, b.prefix)
		put(t, st, snapshot("hammer", func(s *limiter.Snapshot) {
			s.Rate = &limiter.Rate{PerSecond: 0.01, Burst: 2} // refills in 100s: the refusal stays cached
		}))
		var cacheHits int
		var subscribed atomic.Bool
		l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Hooks: limiter.Hooks{
			OnRefusalCacheHit: func(string) { cacheHits++ },
			// The subscription's confirmation drops every cached refusal
			// (invalidations may have been missed before it): wait for it,
			// or one refusal of the loop goes to Redis (seen in CI).
			OnInvalidation: func(tenant string, all bool) {
				if all {
					subscribed.Store(true)
				}
			},
		}})
		limitertest.Eventually(t, 10*time.Second, "the invalidation subscription confirmed", subscribed.Load)
		refused := 0
		for i := 0; i < 20; i++ {
			d, err := l.Allow(ctx, "hammer", limiter.Request{Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				refused++
			}
		}
		if refused != 18 || cacheHits != 17 {
			t.Fatalf("refused %d (want 18), from the cache %d (want 17)", refused, cacheHits)
		}
		// Peeks answered from the cache ask and take nothing: not counted.
		for i := 0; i < 5; i++ {
			if d, err := l.Allow(ctx, "hammer", limiter.Request{Cost: 1, Peek: true}); err != nil || d.Allowed {
				t.Fatalf("peek: %+v %v, want refused", d, err)
			}
		}
		if cacheHits != 22 {
			t.Fatalf("%d refusals from the cache, want the 5 peeks answered from it too", cacheHits)
		}
		// The background flush adds the 17 within about a second.
		limitertest.Eventually(t, 10*time.Second, "18 refusals in Redis", func() bool {
			rf, err := st.Refusals(ctx, "hammer", time.Now())
			return err == nil && rf[limiter.PolicyRate] == 18
		})
		// Close flushes what is left.
		l.Allow(ctx, "hammer", limiter.Request{Cost: 1}) //nolint:errcheck
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		rf, err := st.Refusals(ctx, "hammer", time.Now())
		if err != nil || rf[limiter.PolicyRate] != 19 {
			t.Fatalf("after Close: %v %v, want 19", rf, err)
		}
	})
}

// Refusals made by the local fail mode while Redis is down are 429s too:
// counted in process and added to the Redis counters by the background
// flush once Redis answers again (a refused peek is not a request and is
// not counted, as in the script).
func TestOutageRefusalsAreCountedWhenRedisReturns(t *testing.T) {
	srv := startPrivate(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	st := newStore(rdb, "")
	s := snapshot("outage", func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 0.01, Burst: 4} // refills in 100 s
	})
	put(t, st, s)
	l := newLimiter(t, rdb, limiter.Options{
		Timeout: 50 * time.Millisecond, Cooldown: 20 * time.Millisecond, ExpectedInstances: 2,
		FailMode: limiter.FailModes{Rate: limiter.FailLocal},
		Loader: func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
			return s, st.PutSnapshot(ctx, s)
		},
	})
	if d, err := l.Allow(ctx, "outage", limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Fallback != "" {
		t.Fatalf("before the outage: %+v %v", d, err)
	}
	srv.Kill()
	// The local bucket holds burst 4 / 2 instances = 2: 12 requests give 2
	// admitted and 10 refused, all decided locally.
	refused := 0
	for i := 0; i < 12; i++ {
		d, err := l.Allow(ctx, "outage", limiter.Request{Cost: 1})
		if err != nil || d.Fallback != limiter.FailLocal {
			t.Fatalf("#%d in the outage: %+v %v", i, d, err)
		}
		if !d.Allowed {
			if d.Policy != limiter.PolicyRate {
				t.Fatalf("#%d refused by %q", i, d.Policy)
			}
			refused++
		}
	}
	if refused != 10 {
		t.Fatalf("refused %d in the outage, want 10", refused)
	}
	if d, err := l.Allow(ctx, "outage", limiter.Request{Cost: 1, Peek: true}); err != nil || d.Allowed || d.Fallback != limiter.FailLocal {
		t.Fatalf("peek in the outage: %+v %v", d, err)
	}
	if err := limiter.FlushRefusals(l, ctx); err == nil {
		t.Error("FlushRefusals succeeded with Redis dead: nothing was counted, or it did not try")
	}
	srv.Restart(t) // empty: the counts come only from this process
	// No decision from here on: only the background flush writes.
	limitertest.Eventually(t, 10*time.Second, "10 outage refusals in Redis", func() bool {
		rf, err := st.Refusals(ctx, "outage", time.Now())
		return err == nil && rf[limiter.PolicyRate] == 10
	})
	// Flushed once: a later flush adds nothing.
	if err := limiter.FlushRefusals(l, ctx); err != nil {
		t.Fatal(err)
	}
	if rf, err := st.Refusals(ctx, "outage", time.Now()); err != nil || rf[limiter.PolicyRate] != 10 || len(rf) != 1 {
		t.Fatalf("after a second flush: %v %v, want rate 10", rf, err)
	}
}
