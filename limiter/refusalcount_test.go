package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// Refusals answered from the local refusal cache never reach Redis in the
// decision itself; they must still be counted, or the dashboard shows 1 of
// 18 refusals.
func TestCachedRefusalsAreCounted(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rdb := b.client()
		st := limitstore.New(rdb, b.prefix)
		put(t, st, snapshot("hammer", func(s *limiter.Snapshot) {
			s.Rate = &limiter.Rate{PerSecond: 0.01, Burst: 2} // refills in 100s: the refusal stays cached
		}))
		var cacheHits int
		l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Hooks: limiter.Hooks{
			OnRefusalCacheHit: func(string) { cacheHits++ },
		}})
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
		// The background flush adds the 17 within about a second.
		testkit.Eventually(t, 10*time.Second, "18 refusals in Redis", func() bool {
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
