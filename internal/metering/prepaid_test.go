package metering

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

// Units that Tollgate's own grants covered (admin, top-up, rollover) are
// not billed again as overage, in the Stripe report or in GET /v1/usage;
// units a Stripe credit grant covered are reported, since Stripe applies
// that credit on the invoice (discounting them here would discount them
// twice). A "total" meter is sent its usage less the prepaid units too.
func TestPrepaidUnitsAreNotReportedAsOverage(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	ctx := context.Background()
	fake := newFakeStripe(t)
	tenant, customer := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{
		"tokens": {100, "overage"}, "seats": {10, "total"}})
	ents := entitlements.NewService(b.db, b.store, nil, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	creds := credits.NewService(b.db, ents, cat, nil, credits.Options{})
	svc := b.withSnapshots(t, Options{Prepaid: creds.PrepaidConsumed}, map[string]map[string]int64{tenant: {"tokens": 100, "seats": 10}})
	now := time.Now()
	if _, err := svc.Ingest(ctx, tenant, []Event{ev("t1", "tokens", 150, now), ev("s1", "seats", 7, now)}); err != nil {
		t.Fatal(err)
	}
	var start time.Time
	if err := b.db.QueryRow(ctx, `SELECT period_start FROM usage_periods WHERE tenant_id = $1 AND meter = 'tokens'`, tenant).Scan(&start); err != nil {
		t.Fatal(err)
	}
	grant := func(meter string, amount int64, source string) string {
		t.Helper()
		g, _, err := creds.CreateTx(ctx, b.db, credits.NewGrant{TenantID: tenant, Meter: meter, Amount: amount, Priority: 50,
			EffectiveAt: now.Add(-time.Hour), Source: source, SourceRef: source + randHex(4)})
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	topup, stripeCredit, seats := grant("tokens", 40, credits.SourceTopup), grant("tokens", 100, credits.SourceStripeCredit), grant("seats", 5, credits.SourceAdmin)
	if _, err := creds.RecordDraws(ctx, []credits.Draw{
		{FlushID: "f1", GrantID: topup, PeriodStart: start, Units: 30},
		{FlushID: "f1", GrantID: stripeCredit, PeriodStart: start, Units: 15},
		{FlushID: "f1", GrantID: seats, PeriodStart: start, Units: 2},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ReportToStripe(ctx, fake.sender()); err != nil {
		t.Fatal(err)
	}
	sum := func(name string) int64 { return fake.sent(name, customer) }
	if got := sum("tg_tokens"); got != 20 {
		t.Fatalf("tokens overage sent = %d, want 20 (150 used, 100 included, 30 from a top-up; the Stripe credit's 15 stay billed)", got)
	}
	if got := sum("tg_seats"); got != 5 {
		t.Fatalf("seats sent = %d, want 5 (7 used, 2 prepaid)", got)
	}
	// GET /v1/usage of the same window (the snapshot names the tenant's period).
	report := svc.opts.Snapshot
	svc.opts.Snapshot = func(ctx context.Context, id string) (limiter.Snapshot, error) {
		snap, err := report(ctx, id)
		snap.PeriodStart, snap.PeriodEnd = start, start.AddDate(0, 1, 0)
		return snap, err
	}
	u, err := svc.Usage(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range u.Meters {
		if m.Meter == "tokens" {
			found = true
			if m.Used != 150 || m.Overage != 20 {
				t.Errorf("GET /v1/usage shows tokens used %d, overage %d; want 150 and 20", m.Used, m.Overage)
			}
		}
	}
	if !found {
		t.Errorf("GET /v1/usage has no tokens: %+v", u.Meters)
	}
	// What was taken off: the top-up's 30, not the Stripe credit's 15.
	if got, _ := creds.PrepaidConsumed(ctx, tenant, "tokens", start); got != 30 {
		t.Fatalf("prepaid tokens = %d, want 30 (the top-up's; not the Stripe credit's)", got)
	}
}
