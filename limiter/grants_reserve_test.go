package limiter_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// settle settles a reservation and fails the test on an error.
func settle(t testing.TB, l *limiter.Limiter, tenant string, d *limiter.Decision, actual int64) {
	t.Helper()
	if d.Reservation == nil {
		t.Fatalf("admitted without a reservation (fallback %q)", d.Fallback)
	}
	if _, err := l.Settle(context.Background(), tenant, d.Reservation.ID, actual); err != nil {
		t.Fatal(err)
	}
}

// A settlement below the estimate gives back to the grants what the
// reservation drew and did not use, the last drawn first, before the
// included units; one above it draws from the grants as a decision would;
// a soft quota's overage is given back before the grants. On one Redis and
// on a Cluster.
func TestSettleRefundsGrants(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		st := newStore(b.client(), b.prefix)
		l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second})
		s := snapshot("rsv-grants", hardQuota(100, limiter.ModeHard))
		put(t, st, s)
		putGrants(t, st, "rsv-grants", grant("ga", 50), grant("gb", 50))
		left := func(wantA, wantB, wantUsed int64, what string) {
			t.Helper()
			a, bb := grantLeft(t, st, "rsv-grants", "ga"), grantLeft(t, st, "rsv-grants", "gb")
			used, _, err := st.Used(ctx, "rsv-grants", "requests", s.PeriodStart)
			if err != nil || a != wantA || bb != wantB || used != wantUsed {
				t.Fatalf("%s: grants left %d, %d and counter %d (%v); want %d, %d and %d", what, a, bb, used, err, wantA, wantB, wantUsed)
			}
		}
		limitertest.Allowed(t, l, "rsv-grants", limiter.Request{Cost: 80})
		// 20 included, 50 of ga, 30 of gb
		d := limitertest.Allowed(t, l, "rsv-grants", limiter.Request{Cost: 100, Reserve: true})
		left(0, 20, 180, "reserved 100")
		// 50 given back: gb's 30 (drawn last), then 20 of ga's 50
		settle(t, l, "rsv-grants", d, 50)
		left(20, 50, 130, "settled at 50")
		// 40 of ga's 20 and gb; then 20 more than the estimate: no
		// included unit is left, so they come from gb
		d = limitertest.Allowed(t, l, "rsv-grants", limiter.Request{Cost: 40, Reserve: true})
		left(0, 30, 170, "reserved 40")
		settle(t, l, "rsv-grants", d, 60)
		left(0, 10, 190, "settled at 60")
		// A cancel gives all of it back.
		d = limitertest.Allowed(t, l, "rsv-grants", limiter.Request{Cost: 10, Reserve: true})
		left(0, 0, 200, "reserved 10")
		if _, err := l.Cancel(ctx, "rsv-grants", d.Reservation.ID); err != nil {
			t.Fatal(err)
		}
		left(0, 10, 190, "cancelled")

		// Soft: 10 included, 5 of the grant, 5 of overage; settled at 12,
		// the overage goes back first, then 3 of the grant.
		soft := snapshot("rsv-soft", hardQuota(10, limiter.ModeSoft))
		put(t, st, soft)
		putGrants(t, st, "rsv-soft", grant("gs", 5))
		d = limitertest.Allowed(t, l, "rsv-soft", limiter.Request{Cost: 20, Reserve: true})
		settle(t, l, "rsv-soft", d, 12)
		if n := grantLeft(t, st, "rsv-soft", "gs"); n != 3 {
			t.Fatalf("soft grant left %d after settling 20 at 12, want 3 (overage given back first)", n)
		}
	})
}

// Reservations of many callers across limiters, settled below, at and
// above their estimates and cancelled, leave the grants drawn by exactly
// what was settled beyond the included units: with none included, the
// grants' draws equal the counter; with some, the counter less the draws
// (what the included units gave) is between 0 and the included units.
// Without the settlement's refund the draws exceed the counter. Batched
// decisions too.
func TestSettleRefundsGrantsConcurrent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, c := range []struct {
			name     string
			included int64
			batching bool
		}{{"none-included", 0, false}, {"included", 300, false}, {"batching", 0, true}} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				tenant := "rsv-conc-" + c.name
				ls, st := fleet(t, b, limiter.Options{Timeout: 30 * time.Second, Batching: c.batching})
				s := snapshot(tenant, hardQuota(c.included, limiter.ModeHard))
				put(t, st, s)
				const ga, gb = 3000, 100000
				putGrants(t, st, tenant, grant("ga", ga), grant("gb", gb))
				var settled, admitted atomic.Int64
				hammer(ls, 10, func(l *limiter.Limiter, _, _ int) {
					est := int64(1 + rand.IntN(5))
					d, err := l.Allow(ctx, tenant, limiter.Request{Cost: est, Reserve: true})
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed || d.Reservation == nil {
						t.Errorf("refused or unreserved with grants to spare: %+v", d)
						return
					}
					admitted.Add(1)
					var actual int64
					if rand.IntN(4) > 0 { // a quarter cancel
						actual = int64(rand.IntN(9)) // below, at or above the estimate
					}
					if _, err := ls[rand.IntN(len(ls))].Settle(ctx, tenant, d.Reservation.ID, actual); err != nil {
						t.Error(err)
						return
					}
					settled.Add(actual)
				})
				if t.Failed() {
					return
				}
				used, _, err := st.Used(ctx, tenant, "requests", s.PeriodStart)
				if err != nil || used != settled.Load() {
					t.Fatalf("counter %d (%v), settled %d", used, err, settled.Load())
				}
				drew := ga - grantLeft(t, st, tenant, "ga") + gb - grantLeft(t, st, tenant, "gb")
				if inc := used - drew; inc < 0 || inc > c.included {
					t.Fatalf("counter %d, grants drew %d: the included units gave %d, want 0 to %d", used, drew, inc, c.included)
				}
				if c.included == 0 && drew != used {
					t.Fatalf("grants drew %d for a counter of %d with nothing included", drew, used)
				}
				t.Logf("%d admitted, %d settled, grants drew %d", admitted.Load(), used, drew)
			})
		}
	})
}
