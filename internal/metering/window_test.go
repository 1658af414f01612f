package metering

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// addMonths adds n calendar months, the day clamped to the month's last
// (Stripe's rule), written out here so the test does not trust the code it
// tests.
func addMonths(t time.Time, n int) time.Time {
	first := time.Date(t.Year(), t.Month()+time.Month(n), 1, t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
	last := first.AddDate(0, 1, -1).Day()
	return first.AddDate(0, 0, min(t.Day(), last)-1)
}

// yearlyEndingMonthAt returns a yearly billing period and its monthly
// windows around e: month one ends at e, month two follows. It starts k
// months before e, k the smallest whose day is e's (an e on the 31st needs
// a 31-day month to start from).
func yearlyEndingMonthAt(t *testing.T, e time.Time) (sub, month1, month2 period.Period) {
	t.Helper()
	for k := 1; k <= 11; k++ {
		s := addMonths(e, -k)
		if s.Day() != e.Day() {
			continue
		}
		sub = period.Period{Start: s, End: addMonths(s, 12)}
		month1 = period.Period{Start: addMonths(s, k-1), End: e}
		month2 = period.Period{Start: e, End: addMonths(s, k+1)}
		return sub, month1, month2
	}
	t.Fatalf("no yearly period has a monthly window ending at %s", e)
	return
}

// A tenant on an annual price uses up its monthly quota and is refused;
// when the month ends (on the billing anchor day, inside the billing year)
// the limiter moves to the next month's counter on its own and admits it
// again. The snapshot, GET /v1/usage and the flush all use the month, not
// the year, and a plan with quota_window billing_period keeps the year.
func TestYearlySubscriptionQuotaResetsMonthly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ent := entitlements.NewService(b.db, b.store, testLog(t), entitlements.Options{})
	tenant := b.newTenant(t, time.Now().Add(-400*24*time.Hour))
	// Far enough ahead that month one's requests land before it ends.
	e := time.Now().Add(4 * time.Second).Truncate(time.Second).UTC()
	sub, month1, month2 := yearlyEndingMonthAt(t, e)
	if _, err := b.db.Exec(b.ctx, `
INSERT INTO plan_quotas (plan_key, meter, quota_limit, mode) SELECT plan_key, 'requests', 5, 'hard' FROM tenants WHERE id = $1;
`, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `
INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end)
VALUES ($1, $2, 'cus_y', 'active', $3, $4)`, "sub_"+randHex(6), tenant, sub.Start, sub.End); err != nil {
		t.Fatal(err)
	}
	snap, err := ent.BumpAndPublish(b.ctx, tenant, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !snap.PeriodStart.Equal(month1.Start) || !snap.PeriodEnd.Equal(e) || !snap.NextPeriodEnd.Equal(month2.End) {
		t.Fatalf("snapshot window [%s, %s) next end %s, want month one [%s, %s) then %s (year %+v)",
			snap.PeriodStart, snap.PeriodEnd, snap.NextPeriodEnd, month1.Start, e, month2.End, sub)
	}
	lim := newLimiter(t, b)
	if got := admit(t, b, lim, tenant, 8); got != 5 {
		t.Fatalf("admitted %d in month one, want 5", got)
	}
	if got := admit(t, b, lim, tenant, 1); got != 0 {
		t.Fatalf("admitted %d over month one's quota, want 0", got)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}

	testkit.Eventually(t, 15*time.Second, "month one to end", func() bool { return time.Now().After(e.Add(50 * time.Millisecond)) })
	if got := admit(t, b, lim, tenant, 3); got != 3 {
		t.Fatalf("admitted %d in month two of the yearly subscription, want 3 (a fresh monthly quota)", got)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.durable(t, tenant, "requests", month1.Start); got != 5 {
		t.Fatalf("month one durable = %d, want 5", got)
	}
	if got := b.durable(t, tenant, "requests", month2.Start); got != 3 {
		t.Fatalf("month two durable = %d, want 3 (keyed by the window start %s)", got, month2.Start)
	}
	var end time.Time
	if err := b.db.QueryRow(b.ctx, `SELECT period_end FROM usage_periods WHERE tenant_id = $1 AND period_start = $2`, tenant, month2.Start).Scan(&end); err != nil || !end.Equal(month2.End) {
		t.Fatalf("flushed month two ends %s (%v), want %s", end, err, month2.End)
	}
	u, err := b.svc.Usage(b.ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if u.Period != month2 || len(u.Meters) != 1 || u.Meters[0].Used != 3 || *u.Meters[0].Remaining != 2 {
		t.Fatalf("usage = %+v %+v, want month two %+v with 3 used, 2 remaining", u.Period, u.Meters, month2)
	}

	// The same year with quota_window billing_period: one window, the year.
	if _, err := b.db.Exec(b.ctx, `UPDATE plans SET quota_window = 'billing_period' WHERE key = (SELECT plan_key FROM tenants WHERE id = $1)`, tenant); err != nil {
		t.Fatal(err)
	}
	snap, err = ent.BumpAndPublish(b.ctx, tenant, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !snap.PeriodStart.Equal(sub.Start) || !snap.PeriodEnd.Equal(sub.End) {
		t.Fatalf("billing_period snapshot [%s, %s), want the year %+v", snap.PeriodStart, snap.PeriodEnd, sub)
	}
	tp, err := loadTenantPeriods(b.ctx, b.db, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if p := tp.at(time.Now()); p != sub {
		t.Fatalf("metering's billing_period window %+v, want the year %+v", p, sub)
	}
}
