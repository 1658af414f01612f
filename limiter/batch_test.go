package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

func TestBatchingExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ls, st := fleet(t, b, limiter.Options{Timeout: 2 * time.Second, Batching: 200 * time.Microsecond})
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
