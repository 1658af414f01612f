package metering

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// TestFlushCarriesSettledRefunds: a reservation settled below its
// estimate after the estimate was flushed gives units back through a
// negative flush, so Postgres ends at the settled figure (the hour's
// history never below zero).
func TestFlushCarriesSettledRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	snap := b.putSnapshot(t, tenant, 1, map[string]limiter.Quota{"tokens": {Limit: 1000, Mode: "hard"}})
	lim := newLimiter(t, b)
	hour := time.Now().Truncate(time.Hour)
	d, err := lim.Allow(b.ctx, tenant, limiter.Request{Cost: 50, Meter: "tokens", Reserve: true})
	if err != nil || !d.Allowed || d.Reservation == nil {
		t.Fatalf("%+v %v", d, err)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.durable(t, tenant, "tokens", snap.PeriodStart); got != 50 {
		t.Fatalf("durable %d after flushing the estimate", got)
	}
	if _, err := lim.Settle(b.ctx, tenant, d.Reservation.ID, 12); err != nil {
		t.Fatal(err)
	}
	st, err := b.svc.FlushOnce(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Units != -38 {
		t.Fatalf("flush %+v, want -38 units", st)
	}
	if got := b.durable(t, tenant, "tokens", snap.PeriodStart); got != 12 {
		t.Fatalf("durable %d, want the settled 12", got)
	}
	// (A refund flushed in the next hour is clamped at that hour's zero.)
	if n := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_hourly WHERE tenant_id = $1 AND meter = 'tokens'`, tenant); n != 12 && time.Now().Truncate(time.Hour).Equal(hour) {
		t.Fatalf("hourly history %d, want 12", n)
	}
}
