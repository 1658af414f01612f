package entitlements_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestPlanWindowsGoIntoTheSnapshot: a plan's windows are published in its
// tenants' snapshots (what the limiter enforces), in the plan's order, a
// quota override leaves them alone, a fallback keeps those the default
// plan does not name, and the explanation shows each with its source.
func TestPlanWindowsGoIntoTheSnapshot(t *testing.T) {
	b := setup(t) // default plan: requests 100 hard, no windows
	paid := uniq("win")
	b.mustPlan(t, catalogue.PlanInput{Key: paid,
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10000)}},
		Windows: catalogue.WindowInputs{
			{Name: "hourly", Limit: ptr[int64](5000), Length: "60m", Kind: "fixed"},
			{Name: "per-minute", Limit: ptr[int64](60), Length: "1m"},
		}})
	tn := b.mustTenant(t, paid)
	if _, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](50), Reason: "launch"}); err != nil {
		t.Fatal(err)
	}
	want := []limiter.Window{
		{Name: "hourly", Limit: 5000, Length: time.Hour, Kind: limiter.WindowFixed},
		{Name: "per-minute", Limit: 60, Length: time.Minute, Kind: limiter.WindowSliding},
	}
	snap, err := b.svc.BumpAndPublish(b.ctx, tn.ID, "test")
	if err != nil || !slices.Equal(snap.Windows, want) {
		t.Fatalf("snapshot windows %+v (%v), want %+v", snap.Windows, err, want)
	}
	stored, ok, err := b.store.Snapshot(b.ctx, tn.ID)
	if err != nil || !ok || !slices.Equal(stored.Windows, want) {
		t.Fatalf("published windows %+v %v %v", stored.Windows, ok, err)
	}
	e := b.mustExplain(t, tn.ID)
	agree(t, b, e)
	h := limitOf(t, e, entitlements.WindowPolicy("hourly"))
	if h.Unlimited || *h.Limit != 5000 || h.Window != "hourly" || h.Length != "1h" || h.Kind != "fixed" ||
		!slices.Equal(kinds(h), []string{"plan"}) || !strings.Contains(h.Sources[0].Detail, "5,000 per 1h, fixed") {
		t.Fatalf("hourly = %s", dump(h))
	}
	var order []string
	for _, l := range e.Limits {
		order = append(order, l.Policy)
	}
	if !slices.Equal(order[:4], []string{"rate", "concurrency", "window:hourly", "window:per-minute"}) {
		t.Fatalf("limits in order %v", order)
	}

	// Canceled: the default plan names no window, so the paid plan's stay.
	b.subscribe(t, tn.ID, "canceled", 1, nil, nil, nil)
	snap, err = b.svc.SnapshotFromPostgres(b.ctx, tn.ID)
	if err != nil || snap.Plan != b.free || !slices.Equal(snap.Windows, want) {
		t.Fatalf("after a fallback: plan %s windows %+v (%v)", snap.Plan, snap.Windows, err)
	}
	e = b.mustExplain(t, tn.ID)
	agree(t, b, e)
	if m := limitOf(t, e, entitlements.WindowPolicy("per-minute")); !slices.Equal(kinds(m), []string{"subscription", "default_plan_fallback", "plan"}) {
		t.Fatalf("per-minute after a fallback = %s", dump(m))
	}
}

// TestPlanWindowNamedLikeAQuota: a window may not take the name of one of
// the plan's quotas (a decision and its headers name both alike).
func TestPlanWindowNamedLikeAQuota(t *testing.T) {
	in := catalogue.PlanInput{Key: "pro", Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10)}},
		Windows: catalogue.WindowInputs{{Name: "ok", Limit: ptr[int64](1), Length: "1h"}, {Name: "requests", Limit: ptr[int64](1), Length: "1h"}}}
	if got := fieldsOf(in.Validate()); !slices.Equal(got, []string{"windows[1].name"}) {
		t.Fatalf("fields = %v", got)
	}
}
