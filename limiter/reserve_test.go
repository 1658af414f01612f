package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestReserveSettleCancel: a reservation is decided like any request and
// counts its estimate; settling charges the actual cost instead (refund or
// charge, a charge beyond the limit recorded, never refused); cancelling
// gives the estimate back; a settled, cancelled or other tenant's
// reservation is not found; the durable (pending) figure follows.
func TestReserveSettleCancel(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := limitstore.New(rdb, b.prefix)
	s := snapshot("llm", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"tokens": {Limit: 100, Mode: limiter.ModeHard}}
	})
	put(t, st, s)
	put(t, st, snapshot("other", nil))
	l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second})
	used := func() int64 {
		n, _, err := st.Used(ctx, "llm", "tokens", s.PeriodStart)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	pending := func() int64 {
		n, err := st.Unflushed(ctx, "llm", "tokens", s.PeriodStart)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	reserve := func(est int64) *limiter.Decision {
		t.Helper()
		d, err := l.Allow(ctx, "llm", limiter.Request{Cost: est, Meter: "tokens", Reserve: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	d := reserve(10)
	if !d.Allowed || d.Reservation == nil || d.Reservation.Estimate != 10 || len(d.Reservation.ID) != 24 || !d.Reservation.ExpiresAt.After(time.Now()) {
		t.Fatalf("reserve: %+v %+v", d, d.Reservation)
	}
	if used() != 10 {
		t.Fatalf("used %d after reserving 10", used())
	}
	// The durable side flushes the estimate meanwhile.
	k := limitstore.PendingKey{Tenant: "llm", Meter: "tokens", PeriodStart: s.PeriodStart}
	c, ok, err := st.ClaimPending(ctx, k)
	if err != nil || !ok || c.N != 10 {
		t.Fatalf("claim %+v %v %v", c, ok, err)
	}
	if err := st.AckPending(ctx, k, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, "other", d.Reservation.ID, 1); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("another tenant's reservation: %v", err)
	}
	if est, err := l.Settle(ctx, "llm", d.Reservation.ID, 4); err != nil || est != 10 {
		t.Fatalf("settle: %d %v", est, err)
	}
	if used() != 4 || pending() != -6 {
		t.Fatalf("after settling 4 of 10: used %d, pending %d (want 4, -6)", used(), pending())
	}
	// The refund reaches the durable figure through a (negative) flush.
	if c, ok, err := st.ClaimPending(ctx, k); err != nil || !ok || c.N != -6 {
		t.Fatalf("claim of the refund %+v %v %v", c, ok, err)
	} else if err := st.AckPending(ctx, k, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, "llm", d.Reservation.ID, 4); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("settled twice: %v", err)
	}
	if _, err := l.Cancel(ctx, "llm", "not-an-id"); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := l.Settle(ctx, "llm", d.Reservation.ID, -1); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("negative actual: %v", err)
	}

	// Cancel gives the estimate back.
	d = reserve(30)
	if used() != 34 {
		t.Fatalf("used %d", used())
	}
	if est, err := l.Cancel(ctx, "llm", d.Reservation.ID); err != nil || est != 30 || used() != 4 {
		t.Fatalf("cancel: %d %v, used %d", est, err, used())
	}

	// A charge beyond the limit is recorded, never refused; what follows is refused.
	d = reserve(90)
	if !d.Allowed {
		t.Fatalf("90 of 96 left refused: %+v", d)
	}
	if _, err := l.Settle(ctx, "llm", d.Reservation.ID, 150); err != nil {
		t.Fatalf("settle beyond the limit: %v", err)
	}
	if used() != 154 {
		t.Fatalf("used %d, want 154", used())
	}
	if d := reserve(1); d.Allowed || d.Reservation != nil {
		t.Fatalf("admitted over the limit: %+v", d)
	}
	// A refused reservation holds nothing; a peek reserves nothing.
	if d, err := l.Allow(ctx, "llm", limiter.Request{Meter: "tokens", Reserve: true, Peek: true}); err != nil || d.Reservation != nil {
		t.Fatalf("peek with Reserve: %+v %v", d, err)
	}
}

// TestReservationExpiresAtItsEstimate: one never settled stays charged at
// its estimate once its record is gone.
func TestReservationExpiresAtItsEstimate(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := limitstore.New(rdb, b.prefix)
	s := snapshot("exp", func(s *limiter.Snapshot) { s.Quotas = map[string]limiter.Quota{"requests": {Limit: 100}} })
	put(t, st, s)
	l := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, ReservationTTL: 50 * time.Millisecond})
	d, err := l.Allow(ctx, "exp", limiter.Request{Cost: 7, Reserve: true})
	if err != nil || d.Reservation == nil {
		t.Fatalf("%+v %v", d, err)
	}
	testkit.Eventually(t, 5*time.Second, "the reservation record expires", func() bool {
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
