package entitlements_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// Yearly subscriptions anchored on the 29th, 30th and 31st: the snapshot
// (read from Postgres, published to Redis) carries the month of the year
// that contains now, clamped at month ends the way Stripe clamps, the
// anchor day coming back after a short month, and the next month's end so
// the limiter rolls on its own; with quota_window billing_period, the year.
func TestSnapshotMonthlyWindowsOfYearlySubscriptionAnchors29To31(t *testing.T) {
	b := setup(t)
	d := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		start, now               string
		wantStart, wantEnd, next string
	}{
		{"2025-01-31T08:00:00Z", "2025-02-15T00:00:00Z", "2025-01-31T08:00:00Z", "2025-02-28T08:00:00Z", "2025-03-31T08:00:00Z"},
		{"2025-01-31T08:00:00Z", "2025-03-01T00:00:00Z", "2025-02-28T08:00:00Z", "2025-03-31T08:00:00Z", "2025-04-30T08:00:00Z"},
		{"2024-01-30T08:00:00Z", "2024-02-29T09:00:00Z", "2024-02-29T08:00:00Z", "2024-03-30T08:00:00Z", "2024-04-30T08:00:00Z"},
		{"2024-02-29T08:00:00Z", "2024-12-30T00:00:00Z", "2024-12-29T08:00:00Z", "2025-01-29T08:00:00Z", "2025-02-28T08:00:00Z"},
		{"2025-03-29T08:00:00Z", "2026-02-28T12:00:00Z", "2026-02-28T08:00:00Z", "2026-03-29T08:00:00Z", "2026-04-29T08:00:00Z"},
	}
	for _, c := range cases {
		plan := uniq("annual")
		b.mustPlan(t, catalogue.PlanInput{Key: plan, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10)}}})
		tn := b.mustTenant(t, plan)
		start := d(c.start)
		if _, err := b.pool.Exec(b.ctx, `
INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end)
VALUES ($1, $2, $3, 'active', $4, $5)`, uniq("sub"), tn.ID, uniq("cus"), start, yearAfter(start)); err != nil {
			t.Fatal(err)
		}
		now := d(c.now)
		svc := entitlements.NewService(b.pool, b.store, slog.New(slog.DiscardHandler), entitlements.Options{
			DefaultPlan: b.free, Now: func() time.Time { return now }})
		snap, err := svc.BumpAndPublish(b.ctx, tn.ID, "test")
		if err != nil {
			t.Fatal(err)
		}
		if !snap.PeriodStart.Equal(d(c.wantStart)) || !snap.PeriodEnd.Equal(d(c.wantEnd)) || !snap.NextPeriodEnd.Equal(d(c.next)) {
			t.Errorf("year from %s at %s: window [%s, %s) next %s, want [%s, %s) next %s", c.start, c.now,
				snap.PeriodStart, snap.PeriodEnd, snap.NextPeriodEnd, c.wantStart, c.wantEnd, c.next)
		}
		// The month before, for a limiter whose Redis clock is behind ours
		// (issue 22 point 6); the year's first month has none we know.
		if prev, ok := map[string]string{"2025-03-01T00:00:00Z": "2025-01-31T08:00:00Z", "2024-02-29T09:00:00Z": "2024-01-30T08:00:00Z",
			"2024-12-30T00:00:00Z": "2024-11-29T08:00:00Z", "2026-02-28T12:00:00Z": "2026-01-29T08:00:00Z"}[c.now]; ok && !snap.PrevPeriodStart.Equal(d(prev)) {
			t.Errorf("year from %s at %s: previous window from %s, want %s", c.start, c.now, snap.PrevPeriodStart, prev)
		}
		stored, ok, err := b.store.Snapshot(b.ctx, tn.ID)
		if err != nil || !ok || !stored.PeriodStart.Equal(snap.PeriodStart) {
			t.Fatalf("published snapshot %+v %v %v", stored, ok, err)
		}
		if _, err := catalogue.NewService(b.pool, nil, catalogue.Options{Touch: svc.TouchCatalogue}).PatchPlan(b.ctx, plan, func(in *catalogue.PlanInput) error { in.QuotaWindow = "billing_period"; return nil }); err != nil {
			t.Fatal(err)
		}
		snap, err = svc.SnapshotFromPostgres(b.ctx, tn.ID)
		if err != nil || !snap.PeriodStart.Equal(start) || !snap.PeriodEnd.Equal(yearAfter(start)) {
			t.Errorf("billing_period: window [%s, %s) (%v), want the year from %s", snap.PeriodStart, snap.PeriodEnd, err, start)
		}
	}
}

// yearAfter is Stripe's renewal a year on: Feb 29 renews on Feb 28.
func yearAfter(t time.Time) time.Time {
	if y := t.AddDate(1, 0, 0); y.Day() == t.Day() {
		return y
	}
	return time.Date(t.Year()+1, t.Month()+1, 0, t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}
