package entitlements_test

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

func overrideFields(err error) map[string]bool {
	out := map[string]bool{}
	if e, ok := apperr.As(err); ok {
		for _, f := range e.Fields {
			out[f.Field] = true
		}
	}
	return out
}

func TestOverridesApplyThroughNewVersion(t *testing.T) {
	b := setup(t)
	plan := b.mustPlan(t, catalogue.PlanInput{Key: uniq("ov"), Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: ptr[int64](100)}, "exports": {Limit: ptr[int64](5), Mode: "soft"}}})
	tn := b.mustTenant(t, plan.Key)
	before, err := b.svc.SnapshotFromPostgres(b.ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}

	extra, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](50), Reason: "launch week"})
	if err != nil {
		t.Fatal(err)
	}
	if !extra.Active || extra.Meter != "requests" || *extra.Extra != 50 || extra.TenantID != tn.ID {
		t.Fatalf("override = %+v", extra)
	}
	limit, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "exports", Limit: ptr[int64](9), Mode: "hard"})
	if err != nil {
		t.Fatal(err)
	}
	// Published: the snapshot in Redis has the new limits and a new version.
	snap, ok, err := b.store.Snapshot(b.ctx, tn.ID)
	if err != nil || !ok {
		t.Fatalf("snapshot in redis: %v %v", ok, err)
	}
	if snap.Version != before.Version+2 {
		t.Fatalf("version = %d, want %d", snap.Version, before.Version+2)
	}
	if q := snap.Quotas["requests"]; q.Limit != 150 {
		t.Fatalf("requests = %+v, want limit 150", q)
	}
	if q := snap.Quotas["exports"]; q.Limit != 9 || q.Mode != "hard" {
		t.Fatalf("exports = %+v, want 9 hard", q)
	}
	var reason string
	if err := b.pool.QueryRow(b.ctx, `SELECT reason FROM entitlement_versions WHERE tenant_id = $1 AND version = $2`, tn.ID, snap.Version).Scan(&reason); err != nil || reason != "override added: exports" {
		t.Fatalf("version reason = %q, %v", reason, err)
	}

	list, err := b.svc.ListOverrides(b.ctx, tn.ID)
	if err != nil || len(list) != 2 {
		t.Fatalf("list = %+v, %v", list, err)
	}

	// Another tenant cannot delete (or see) them.
	other := b.mustTenant(t, plan.Key)
	if err := b.svc.DeleteOverride(b.ctx, other.ID, extra.ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("delete by another tenant: %v, want not found", err)
	}
	if l, err := b.svc.ListOverrides(b.ctx, other.ID); err != nil || len(l) != 0 {
		t.Fatalf("other tenant's list = %+v, %v", l, err)
	}

	if err := b.svc.DeleteOverride(b.ctx, tn.ID, limit.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.DeleteOverride(b.ctx, tn.ID, limit.ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("second delete: %v, want not found", err)
	}
	snap, _, _ = b.store.Snapshot(b.ctx, tn.ID)
	if q := snap.Quotas["exports"]; q.Limit != 5 || q.Mode != "soft" || snap.Version != before.Version+3 {
		t.Fatalf("after delete: exports = %+v version %d", q, snap.Version)
	}
}

func TestOverrideValidation(t *testing.T) {
	b := setup(t)
	tn := b.mustTenant(t, b.free)
	past := time.Now().Add(-time.Minute)
	cases := []struct {
		name  string
		in    entitlements.OverrideInput
		field string
	}{
		{"bad meter", entitlements.OverrideInput{Meter: "Req!", Extra: ptr[int64](1)}, "meter"},
		{"both", entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](1), Limit: ptr[int64](2)}, "limit"},
		{"negative extra", entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](-1)}, "extra"},
		{"negative limit", entitlements.OverrideInput{Meter: "requests", Limit: ptr[int64](-1)}, "limit"},
		{"bad mode", entitlements.OverrideInput{Meter: "requests", Mode: "strict"}, "mode"},
		{"nothing", entitlements.OverrideInput{Meter: "requests"}, "extra"},
		{"expired", entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](1), ExpiresAt: &past}, "expires_at"},
	}
	for _, c := range cases {
		_, err := b.svc.CreateOverride(b.ctx, tn.ID, c.in)
		if !overrideFields(err)[c.field] {
			t.Errorf("%s: err = %v, want a field error on %s", c.name, err, c.field)
		}
	}
	if _, err := b.svc.CreateOverride(b.ctx, "not-a-uuid", entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](1)}); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("bad tenant id: %v", err)
	}
	if _, err := b.svc.CreateOverride(b.ctx, "00000000-0000-4000-8000-000000000000", entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](1)}); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown tenant: %v", err)
	}
	if l, err := b.svc.ListOverrides(b.ctx, tn.ID); err != nil || len(l) != 0 {
		t.Fatalf("invalid overrides were stored: %+v %v", l, err)
	}
}

// An override that expires stops applying once the periodic refresh runs,
// and the refresh finds nothing more to do afterwards.
func TestExpiredOverrideStopsApplying(t *testing.T) {
	b := setup(t)
	tn := b.mustTenant(t, b.free)
	exp := time.Now().Add(1500 * time.Millisecond)
	if _, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](10), ExpiresAt: &exp}); err != nil {
		t.Fatal(err)
	}
	snap, _, _ := b.store.Snapshot(b.ctx, tn.ID)
	if snap.Quotas["requests"].Limit != 110 {
		t.Fatalf("limit before expiry = %d, want 110", snap.Quotas["requests"].Limit)
	}
	if n, err := b.svc.RefreshExpiredOverrides(b.ctx); err != nil || n != 0 {
		t.Fatalf("refresh before expiry = %d, %v", n, err)
	}
	testkit.Eventually(t, 10*time.Second, "the expired override refreshed", func() bool {
		n, err := b.svc.RefreshExpiredOverrides(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	snap, _, _ = b.store.Snapshot(b.ctx, tn.ID)
	if snap.Quotas["requests"].Limit != 100 {
		t.Fatalf("limit after expiry = %d, want 100", snap.Quotas["requests"].Limit)
	}
	if n, err := b.svc.RefreshExpiredOverrides(b.ctx); err != nil || n != 0 {
		t.Fatalf("second refresh = %d, %v; want nothing to do", n, err)
	}
	l, _ := b.svc.ListOverrides(b.ctx, tn.ID)
	if len(l) != 1 || l[0].Active {
		t.Fatalf("list after expiry = %+v, want one inactive", l)
	}
}
