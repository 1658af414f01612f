package metering

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// A tenant's subscription period ends while it is using its quota: the
// limiter moves to the next period's counter at the period end without
// waiting for anything, the renewal (a new current period written to
// subscriptions, snapshot refreshed) keeps the tenant on that counter, the
// new period starts at zero, and the old period keeps its total and is
// closed with it.
func TestSubscriptionPeriodRollStartsAtZero(t *testing.T) {
	// Not parallel: ClosePeriods closes every open period of the database.
	b := setup(t)
	b.svc.opts.CloseGrace = time.Millisecond
	tenant := b.newTenant(t, time.Now().Add(-90*24*time.Hour))
	// Far enough ahead that the old period's usage lands before it ends, even
	// on a loaded machine.
	oldEnd := time.Now().Add(3 * time.Second).Truncate(time.Second)
	oldStart := oldEnd.Add(-30 * 24 * time.Hour)
	if _, err := b.db.Exec(b.ctx, `
INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end)
VALUES ($1, $2, 'cus_x', 'active', $3, $4)`, "sub_"+randHex(6), tenant, oldStart, oldEnd); err != nil {
		t.Fatal(err)
	}
	quotas := map[string]limiter.Quota{"requests": {Limit: 5, Mode: "hard"}}
	snap := b.putSnapshot(t, tenant, 1, quotas)
	if !snap.PeriodStart.Equal(oldStart) || !snap.PeriodEnd.Equal(oldEnd) {
		t.Fatalf("snapshot period [%s, %s), want the subscription's [%s, %s)", snap.PeriodStart, snap.PeriodEnd, oldStart, oldEnd)
	}
	lim := newLimiter(t, b)
	if got := admit(t, b, lim, tenant, 8); got != 5 {
		t.Fatalf("admitted %d in the old period, want 5", got)
	}
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("old-1", "exports", 4, time.Now())}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}

	// The period ends; no webhook yet: the limiter has rolled on its own.
	testkit.Eventually(t, 10*time.Second, "the old period to end", func() bool { return time.Now().After(oldEnd.Add(50 * time.Millisecond)) })
	if got := admit(t, b, lim, tenant, 3); got != 3 {
		t.Fatalf("admitted %d right after the period end, want 3 (new period, from zero)", got)
	}

	// The renewal arrives: new current period, snapshot refreshed.
	newEnd := oldEnd.Add(31 * 24 * time.Hour)
	if _, err := b.db.Exec(b.ctx, `UPDATE subscriptions SET current_period_start = $2, current_period_end = $3, updated_at = now() WHERE tenant_id = $1`,
		tenant, oldEnd, newEnd); err != nil {
		t.Fatal(err)
	}
	snap = b.putSnapshot(t, tenant, 2, quotas)
	if !snap.PeriodStart.Equal(oldEnd) {
		t.Fatalf("renewed snapshot starts %s, want %s", snap.PeriodStart, oldEnd)
	}
	if got := admit(t, b, lim, tenant, 5); got != 2 {
		t.Fatalf("admitted %d more in the new period, want 2 (3 used of 5)", got)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	u, err := b.svc.Usage(b.ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if !u.Period.Start.Equal(oldEnd) || !u.Period.End.Equal(newEnd) {
		t.Fatalf("usage period %+v, want [%s, %s)", u.Period, oldEnd, newEnd)
	}
	for _, m := range u.Meters {
		if m.Meter == "requests" && m.Used != 5 {
			t.Fatalf("requests used %d in the new period, want 5", m.Used)
		}
		if m.Meter == "exports" {
			t.Fatalf("exports shows %d in the new period, want no usage", m.Used)
		}
	}
	if got := b.durable(t, tenant, "requests", oldStart); got != 5 {
		t.Fatalf("old period requests = %d, want 5 kept", got)
	}
	if got := b.durable(t, tenant, "exports", oldStart); got != 4 {
		t.Fatalf("old period exports = %d, want 4 kept", got)
	}
	if got := b.durable(t, tenant, "requests", oldEnd); got != 5 {
		t.Fatalf("new period requests = %d, want 5", got)
	}

	// Closing keeps the figures and closes only the ended period.
	n, err := b.svc.ClosePeriods(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("closed %d periods, want at least the old requests and exports", n)
	}
	if c := b.count(t, `SELECT count(*) FROM usage_periods WHERE tenant_id = $1 AND period_start = $2 AND closed_at IS NOT NULL`, tenant, oldStart); c != 2 {
		t.Fatalf("closed old periods = %d, want 2", c)
	}
	if c := b.count(t, `SELECT count(*) FROM usage_periods WHERE tenant_id = $1 AND period_start = $2 AND closed_at IS NULL`, tenant, oldEnd); c != 1 {
		t.Fatalf("open new periods = %d, want 1", c)
	}
	if got := b.durable(t, tenant, "requests", oldStart); got != 5 {
		t.Fatalf("closed period requests = %d, want 5", got)
	}
}
