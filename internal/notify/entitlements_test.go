package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// A plan change writes entitlements.updated (before and after, the cause)
// in its own transaction; a bump that changes nothing writes nothing.
func TestPlanChangeEmitsEntitlementsUpdated(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	rdb, prefix := redistest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ents := entitlements.NewService(b.db, limitstore.New(rdb, prefix), log, entitlements.Options{OnChange: b.svc.EntitlementsChanged})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	small, big := int64(100), int64(1000)
	suffix := time.Now().UnixNano()
	planA, planB := fmt.Sprintf("a%d", suffix), fmt.Sprintf("b%d", suffix)
	for key, l := range map[string]*int64{planA: &small, planB: &big} {
		if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: key, Name: key,
			Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: l, Mode: "hard"}}}); err != nil {
			t.Fatal(err)
		}
	}
	tenant, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "t", Plan: planA})
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t)
	if _, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if _, err := ents.ChangePlan(ctx, tenant.ID, planB); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a delivery", func() bool { return len(r.requests()) >= 1 })
	var ev struct {
		Type string
		Data struct {
			TenantID      string `json:"tenant_id"`
			Cause         string
			Before, After Limits
		}
	}
	if err := json.Unmarshal(r.requests()[0].body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != TypeEntitlementsUpdated || ev.Data.TenantID != tenant.ID || ev.Data.Before.Plan != planA || ev.Data.After.Plan != planB ||
		ev.Data.Before.Quotas["requests"].Limit != small || ev.Data.After.Quotas["requests"].Limit != big || ev.Data.Cause == "" {
		t.Errorf("event %s", r.requests()[0].body)
	}
	// A bump with the same limits (a resync that found nothing) is silent.
	if _, err := ents.BumpAndPublish(ctx, tenant.ID, "test"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_events WHERE type = $1`, TypeEntitlementsUpdated).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d entitlements.updated events (%v), want 1", n, err)
	}
}

// A status change emits subscription.status; a hook that fails rolls the
// change back with its events (they share the transaction).
func TestStatusChangeAndRollback(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	c := entitlements.Change{Reason: "stripe", Before: limiter.Snapshot{TenantID: "t1", Version: 3, Plan: "pro", Status: "active"},
		After: limiter.Snapshot{TenantID: "t1", Version: 4, Plan: "pro", Status: "past_due"}}
	if err := pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error { return b.svc.EntitlementsChanged(ctx, tx, c) }); err != nil {
		t.Fatal(err)
	}
	rows, _ := b.db.Query(ctx, `SELECT type FROM webhook_events`)
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(types) != 1 || types[0] != TypeSubscriptionStatus {
		t.Fatalf("events %v (%v), want one subscription.status", types, err)
	}

	rdb, prefix := redistest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	failing := func(ctx context.Context, tx pgx.Tx, c entitlements.Change) error {
		if err := b.svc.EntitlementsChanged(ctx, tx, c); err != nil {
			return err
		}
		return errors.New("boom")
	}
	ents := entitlements.NewService(b.db, limitstore.New(rdb, prefix), log, entitlements.Options{OnChange: failing})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	l1, l2 := int64(1), int64(2)
	suffix := time.Now().UnixNano()
	pa, pb := fmt.Sprintf("ra%d", suffix), fmt.Sprintf("rb%d", suffix)
	for key, l := range map[string]*int64{pa: &l1, pb: &l2} {
		if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: key, Name: key,
			Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: l}}}); err != nil {
			t.Fatal(err)
		}
	}
	tenant, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "t", Plan: pa})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ents.ChangePlan(ctx, tenant.ID, pb); err == nil {
		t.Fatal("plan change with a failing hook succeeded")
	}
	var plan string
	var n int
	if err := b.db.QueryRow(ctx, `SELECT plan_key FROM tenants WHERE id = $1`, tenant.ID).Scan(&plan); err != nil || plan != pa {
		t.Errorf("plan %q (%v), want %q: the change was not rolled back", plan, err, pa)
	}
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_events WHERE type = $1`, TypeEntitlementsUpdated).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d entitlements.updated events, want 0 (rolled back)", n)
	}
}
