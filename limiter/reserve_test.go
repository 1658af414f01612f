package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// TestReservationExpiresAtItsEstimate: one never settled stays charged at
// its estimate once its record is gone.
func TestReservationExpiresAtItsEstimate(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	s := snapshot("exp", func(s *limiter.Snapshot) { s.Quotas = map[string]limiter.Quota{"requests": {Limit: 100}} })
	put(t, st, s)
	l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, ReservationTTL: 50 * time.Millisecond})
	d, err := l.Allow(ctx, "exp", limiter.Request{Cost: 7, Reserve: true})
	if err != nil || d.Reservation == nil {
		t.Fatalf("%+v %v", d, err)
	}
	limitertest.Eventually(t, 5*time.Second, "the reservation record expires", func() bool {
		keys, _ := rdb.Keys(ctx, b.prefix+"*rsv:*").Result()
		return len(keys) == 0
	})
	if _, err := l.Settle(ctx, "exp", d.Reservation.ID, 1); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("settling an expired reservation: %v", err)
	}
	if n, _, _ := st.Used(ctx, "exp", "requests", s.PeriodStart); n != 7 {
		t.Fatalf("used %d after expiry, want the estimate 7", n)
	}
}

// TestReserveSettleConcurrent: 4 Limiters and 200 callers reserve, settle
// (below, at or above the estimate) and cancel at once; the counter ends
// exactly at the sum of what was settled, and the pending (durable) figure
// with it.
func TestReserveSettleConcurrent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		// A generous timeout: a fail-mode decision holds no reservation.
		ls, st := fleet(t, b, limiter.Options{Timeout: 30 * time.Second})
		const q = 2000
		s := snapshot("conc-rsv", func(s *limiter.Snapshot) {
			s.Quotas = map[string]limiter.Quota{"tokens": {Limit: q, Mode: limiter.ModeHard}}
		})
		put(t, st, s)
		var settled, admitted, refusedN atomic.Int64
		hammer(ls, 10, func(l *limiter.Limiter, caller, call int) {
			est := int64(1 + rand.IntN(5))
			d, err := l.Allow(ctx, "conc-rsv", limiter.Request{Cost: est, Meter: "tokens", Reserve: true})
			if err != nil {
				t.Error(err)
				return
			}
			if !d.Allowed {
				refusedN.Add(1)
				return
			}
			if d.Reservation == nil {
				t.Errorf("admitted without a reservation (fallback %q)", d.Fallback)
				return
			}
			admitted.Add(1)
			var actual int64
			if rand.IntN(4) > 0 { // a quarter cancel
				actual = int64(rand.IntN(8)) // below, at or above the estimate
			}
			if _, err := ls[rand.IntN(len(ls))].Settle(ctx, "conc-rsv", d.Reservation.ID, actual); err != nil {
				t.Error(err)
				return
			}
			settled.Add(actual)
		})
		used, _, err := st.Used(ctx, "conc-rsv", "tokens", s.PeriodStart)
		if err != nil || used != settled.Load() {
			t.Fatalf("counter %d (%v), settled %d", used, err, settled.Load())
		}
		pend, _ := st.Unflushed(ctx, "conc-rsv", "tokens", s.PeriodStart)
		if pend != used {
			t.Fatalf("pending %d, counter %d: the durable side would drift", pend, used)
		}
		if admitted.Load() == 0 {
			t.Fatal("nothing admitted")
		}
		t.Logf("admitted %d, refused %d, settled %d units", admitted.Load(), refusedN.Load(), settled.Load())
	})
}
