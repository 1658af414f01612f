package entitlements_test

import (
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// A preview shows the limits the change would give, by the same rules
// (overrides on top of the new plan), and changes nothing.
func TestPreviewPlanChangeAppliesTheRulesAndWritesNothing(t *testing.T) {
	b := setup(t)
	small := b.mustPlan(t, catalogue.PlanInput{Key: uniq("small"), Concurrency: ptr[int64](2),
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100)}}})
	big := b.mustPlan(t, catalogue.PlanInput{Key: uniq("big"), Rate: &catalogue.RateInput{PerSecond: ptr(50.0)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](5000)}, "exports": {Limit: ptr[int64](9), Mode: "soft"}}})
	tn := b.mustTenant(t, small.Key)
	if _, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](25)}); err != nil {
		t.Fatal(err)
	}
	cur, _ := b.svc.SnapshotFromPostgres(b.ctx, tn.ID)

	e, err := b.svc.PreviewPlanChange(b.ctx, tn.ID, big.Key)
	if err != nil {
		t.Fatal(err)
	}
	if e.Before.Plan != small.Key || e.Before.Quotas["requests"].Limit != 125 || e.Before.Concurrency != 2 {
		t.Fatalf("before = %+v", e.Before)
	}
	if e.After.Plan != big.Key || e.After.Quotas["requests"].Limit != 5025 || e.After.Quotas["exports"].Mode != "soft" ||
		e.After.Rate == nil || e.After.Rate.PerSecond != 50 || e.After.Concurrency != 0 {
		t.Fatalf("after = %+v", e.After)
	}
	now, _ := b.svc.SnapshotFromPostgres(b.ctx, tn.ID)
	if now.Plan != small.Key || now.Version != cur.Version {
		t.Fatalf("the preview changed the tenant: plan %s version %d (was %d)", now.Plan, now.Version, cur.Version)
	}
	if _, err := b.svc.PreviewPlanChange(b.ctx, tn.ID, "no-such-plan"); apperr.CodeOf(err) != apperr.Invalid {
		t.Fatalf("unknown plan: %v", err)
	}
	if _, err := b.svc.PreviewPlanChange(b.ctx, "00000000-0000-0000-0000-000000000000", big.Key); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown tenant: %v", err)
	}
}

func TestPreviewOverrideRemovalAndPlanPatch(t *testing.T) {
	b := setup(t)
	plan := b.mustPlan(t, catalogue.PlanInput{Key: uniq("pp"), Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100)}}})
	tn := b.mustTenant(t, plan.Key)
	b.mustTenant(t, plan.Key)
	ov, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Limit: ptr[int64](700)})
	if err != nil {
		t.Fatal(err)
	}
	e, meter, err := b.svc.PreviewOverrideRemoval(b.ctx, tn.ID, ov.ID)
	if err != nil || meter != "requests" || e.Before.Quotas["requests"].Limit != 700 || e.After.Quotas["requests"].Limit != 100 {
		t.Fatalf("override removal preview: %v %s %+v", err, meter, e)
	}
	if ovs, _ := b.svc.ListOverrides(b.ctx, tn.ID); len(ovs) != 1 {
		t.Fatalf("the preview removed the override: %+v", ovs)
	}
	other := b.mustTenant(t, plan.Key)
	if _, _, err := b.svc.PreviewOverrideRemoval(b.ctx, other.ID, ov.ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("another tenant's override: %v", err)
	}

	pe, err := b.cat.PreviewPlanPatch(b.ctx, plan.Key, func(in *catalogue.PlanInput) error {
		in.Quotas["requests"] = &catalogue.QuotaInput{Limit: ptr[int64](50), Mode: "soft"}
		return nil
	})
	if err != nil || pe.Before.Quotas["requests"].Limit != 100 || pe.After.Quotas["requests"].Limit != 50 || pe.After.Quotas["requests"].Mode != "soft" || len(pe.Tenants) != 3 {
		t.Fatalf("plan patch preview: %v %+v", err, pe)
	}
	if p, _ := b.cat.GetPlan(b.ctx, plan.Key); p.Quotas["requests"].Limit != 100 {
		t.Fatalf("the preview saved the plan: %+v", p.Quotas)
	}
	_, err = b.cat.PreviewPlanPatch(b.ctx, plan.Key, func(in *catalogue.PlanInput) error {
		in.Quotas["requests"] = &catalogue.QuotaInput{Limit: ptr[int64](-1)}
		return nil
	})
	if e, ok := apperr.As(err); !ok || len(e.Fields) != 1 || e.Fields[0].Field != "quotas.requests.limit" {
		t.Fatalf("bad patch: %v", err)
	}
}
