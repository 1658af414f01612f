package notify

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// Credits' draws and expiries reach endpoints as grant.low,
// grant.depleted and grant.expired, once per grant: replayed flushes, a
// refund lifting a grant back over the line and the draw that takes it
// under again, and a second expiry run send nothing more. The deliveries
// carry the grant as the change left it.
func TestGrantEventsAreDeliveredOncePerGrant(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	rdb, prefix := redistest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ents := entitlements.NewService(b.db, limitstore.New(rdb, prefix), log, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	limit := int64(1000)
	plan := "grants" + itoa(time.Now().UnixNano())
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan,
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
		t.Fatal(err)
	}
	tenant, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "t", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	clock := func() time.Time { return now }
	creds := credits.NewService(b.db, ents, cat, log, credits.Options{Now: clock, Events: b.svc.GrantEvents})
	r := newReceiver(t)
	if _, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL, Events: []string{TypeGrantLow, TypeGrantDepleted, TypeGrantExpired}}); err != nil {
		t.Fatal(err)
	}
	amount, prio := int64(100), 10
	g, err := creds.Create(ctx, tenant.ID, credits.GrantInput{Meter: "requests", Amount: &amount, Priority: &prio, Reason: "promo"})
	if err != nil {
		t.Fatal(err)
	}
	p := now.Truncate(time.Hour)
	draw := func(flush string, units int64) {
		t.Helper()
		if _, err := creds.RecordDraws(ctx, []credits.Draw{{FlushID: flush, GrantID: g.ID, PeriodStart: p, Units: units}}); err != nil {
			t.Fatal(err)
		}
	}
	draw("a", 85)  // 15 left: low
	draw("a", 85)  // replay
	draw("b", -10) // a settlement refunds: 25 left
	draw("c", 10)  // under again: no second low
	draw("d", 15)  // the last: depleted
	draw("d", 15)  // replay

	soon := now.Add(time.Minute)
	e, err := creds.Create(ctx, tenant.ID, credits.GrantInput{Meter: "requests", Amount: &amount, Priority: &prio, ExpiresAt: &soon})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	for range 2 {
		if _, err := creds.ExpireDue(ctx); err != nil {
			t.Fatal(err)
		}
	}

	waitFor(t, "three deliveries", func() bool { return len(r.requests()) >= 3 })
	type body struct {
		Type string
		Data GrantChanged
	}
	byType := map[string][]GrantChanged{}
	for _, q := range r.requests() {
		var ev body
		if err := json.Unmarshal(q.body, &ev); err != nil {
			t.Fatal(err)
		}
		byType[ev.Type] = append(byType[ev.Type], ev.Data)
	}
	if l := byType[TypeGrantLow]; len(l) != 1 || l[0].Grant.ID != g.ID || l[0].Grant.Remaining != 15 || l[0].Units != 85 || l[0].TenantID != tenant.ID || l[0].Meter != "requests" || l[0].Grant.Reason != "promo" {
		t.Errorf("grant.low: %+v", l)
	}
	if d := byType[TypeGrantDepleted]; len(d) != 1 || d[0].Grant.Remaining != 0 || d[0].Grant.Consumed != 100 {
		t.Errorf("grant.depleted: %+v", d)
	}
	if x := byType[TypeGrantExpired]; len(x) != 1 || x[0].Grant.ID != e.ID || x[0].Units != 100 || x[0].Grant.Expired != 100 || x[0].Grant.ExpiresAt == nil {
		t.Errorf("grant.expired: %+v", x)
	}
	var events int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_events WHERE type LIKE 'grant.%'`).Scan(&events); err != nil || events != 3 {
		t.Errorf("%d grant events in the outbox (%v), want 3", events, err)
	}
	if n := len(r.requests()); n != 3 {
		t.Errorf("%d deliveries, want 3", n)
	}
}
