package entitlements_test

import (
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// A plan edit is the catalogue's; the tenants it reaches are bumped here
// (TouchCatalogue), in the edit's transaction, and published after it.

func TestPatchPlanReachesTenantsAtOnce(t *testing.T) {
	b := setup(t)
	key := uniq("p")
	b.mustPlan(t, catalogue.PlanInput{Key: key, Rate: &catalogue.RateInput{PerSecond: ptr(1.0)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10)}, "exports": {Limit: ptr[int64](1)}}})
	t1, t2 := b.mustTenant(t, key), b.mustTenant(t, key)
	other := b.mustTenant(t, b.free)

	p, err := b.cat.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		in.Quotas["requests"] = &catalogue.QuotaInput{Limit: ptr[int64](99)}
		in.Quotas["exports"] = nil // removes the quota
		in.Rate = nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Rate != nil || p.Quotas["requests"].Limit != 99 || len(p.Quotas) != 1 {
		t.Fatalf("patched plan = %+v", p)
	}
	for _, tn := range []entitlements.Tenant{t1, t2} {
		snap, ok, err := b.store.Snapshot(b.ctx, tn.ID)
		if err != nil || !ok {
			t.Fatalf("snapshot of %s: %v %v", tn.ID, ok, err)
		}
		if snap.Version != 2 || snap.Quotas["requests"].Limit != 99 || snap.Rate != nil {
			t.Fatalf("published snapshot = %+v", snap)
		}
		var reason string
		if err := b.pool.QueryRow(b.ctx, `SELECT reason FROM entitlement_versions WHERE tenant_id = $1 AND version = 2`, tn.ID).Scan(&reason); err != nil {
			t.Fatalf("entitlement_versions row: %v", err)
		}
	}
	if snap, _, _ := b.store.Snapshot(b.ctx, other.ID); snap.Version != 1 {
		t.Fatalf("tenant on another plan was bumped: %+v", snap)
	}

	// A patch that fails validation changes nothing.
	_, err = b.cat.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		in.Quotas["requests"].Limit = ptr[int64](-1)
		return nil
	})
	if apperr.CodeOf(err) != apperr.Invalid {
		t.Fatalf("invalid patch: %v", err)
	}
	_, err = b.cat.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error { in.Key = "renamed"; return nil })
	if !slices.Equal(fieldsOf(err), []string{"key"}) {
		t.Fatalf("key change: %v", err)
	}
	if got, _ := b.cat.GetPlan(b.ctx, key); got.Quotas["requests"].Limit != 99 {
		t.Fatalf("failed patch changed the plan: %+v", got)
	}
	if _, err := b.cat.PatchPlan(b.ctx, "no-such-plan", func(*catalogue.PlanInput) error { return nil }); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown plan: %v", err)
	}
}

// Patching the default plan reaches tenants sent to it by their
// subscription status, not only those assigned to it.
func TestPatchDefaultPlanReachesFallenBackTenants(t *testing.T) {
	b := setup(t)
	paid := uniq("paid")
	b.mustPlan(t, catalogue.PlanInput{Key: paid})
	tn := b.mustTenant(t, paid)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status) VALUES ($1, $2, 'cus_y', 'canceled')`, uniq("sub"), tn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cat.PatchPlan(b.ctx, b.free, func(in *catalogue.PlanInput) error {
		in.Quotas["requests"].Limit = ptr[int64](5)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	snap, ok, err := b.store.Snapshot(b.ctx, tn.ID)
	if err != nil || !ok || snap.Plan != b.free || snap.Version != 2 || snap.Quotas["requests"].Limit != 5 {
		t.Fatalf("fallen-back tenant after default plan patch: %+v %v %v", snap, ok, err)
	}
}
