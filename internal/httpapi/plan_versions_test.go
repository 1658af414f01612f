package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Plan versions (issue 25): an edit with "apply": "new" keeps the tenants on
// the plan on the version they had (grandfathered), new assignments get the
// new one; "apply": "all" (the default) reaches the tenants that follow the
// plan; migrate moves the grandfathered ones (a dry run changes nothing, and
// both are audited); a price may be pinned to a version. GET
// /v1/entitlements, the tenant detail and explain name the version.
func TestPlanVersionsGrandfatherMigrateAndPin(t *testing.T) {
	t.Parallel()
	const token = "tga_versions_audit_token_0123456789"
	actor := uniqueName("vera")
	a := auditAPI(t, actor, token)
	legacy := "price_" + uniqueName("legacy")
	plan := a.createPlan(t, map[string]any{"stripe_price_ids": []string{"price_" + uniqueName("now"), legacy},
		"quotas": map[string]any{"requests": map[string]any{"limit": 1000}}, "features": []string{"sso"}})
	old := a.createTenant(t, plan)
	oldKey, _ := a.issueKey(t, old)
	requests := func(tenant string) (int64, int64) {
		t.Helper()
		var d struct {
			Entitlements struct {
				Quotas      map[string]struct{ Limit int64 } `json:"quotas"`
				PlanVersion int64                            `json:"plan_version"`
			} `json:"entitlements"`
		}
		a.admin(t, http.MethodGet, "/admin/v1/tenants/"+tenant, nil, http.StatusOK).Decode(t, &d)
		return d.Entitlements.Quotas["requests"].Limit, d.Entitlements.PlanVersion
	}

	// "apply": "new": the tenant on the plan keeps version 1.
	r := a.admin(t, http.MethodPatch, "/admin/v1/plans/"+plan, map[string]any{"apply": "new", "quotas": map[string]any{"requests": map[string]any{"limit": 2000}}}, http.StatusOK)
	if r.JSON["version"] != 2.0 {
		t.Fatalf("after the edit: %s", r.Raw)
	}
	if l, v := requests(old); l != 1000 || v != 1 {
		t.Fatalf("grandfathered tenant: requests %d at version %d, want 1000 at version 1", l, v)
	}
	ent := a.do(t, http.MethodGet, "/v1/entitlements", oldKey, nil)
	if ent.Status != http.StatusOK || ent.JSON["plan_version"] != 1.0 {
		t.Fatalf("GET /v1/entitlements: %d %s, want plan_version 1", ent.Status, ent.Raw)
	}
	if ex := a.admin(t, http.MethodGet, "/admin/v1/tenants/"+old+"/explain", nil, http.StatusOK); !strings.Contains(string(ex.Raw), `"plan_version":1`) {
		t.Fatalf("explain must name version 1: %s", ex.Raw)
	}
	fresh := a.createTenant(t, plan)
	if l, v := requests(fresh); l != 2000 || v != 2 {
		t.Fatalf("a tenant assigned after the edit: requests %d at version %d, want 2000 at version 2", l, v)
	}
	// "apply": "all" (the default) reaches the tenants following the plan.
	a.admin(t, http.MethodPatch, "/admin/v1/plans/"+plan, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 3000}}}, http.StatusOK)
	if l, _ := requests(fresh); l != 3000 {
		t.Fatalf("apply all: the following tenant has %d, want 3000", l)
	}
	if l, v := requests(old); l != 1000 || v != 1 {
		t.Fatalf("apply all moved a grandfathered tenant: %d at version %d", l, v)
	}

	// migrate: a dry run answers and changes nothing; then it moves.
	type migration struct {
		DryRun  bool `json:"dry_run"`
		Tenants []struct {
			ID          string `json:"id"`
			Name        string `json:"name"`
			FromVersion int64  `json:"from_version"`
			ToVersion   int64  `json:"to_version"`
			Changes     []struct {
				Limit  string `json:"limit"`
				Before *int64 `json:"before"`
				After  *int64 `json:"after"`
			} `json:"changes"`
		} `json:"tenants"`
	}
	for _, dry := range []bool{true, false} {
		var m migration
		a.do(t, http.MethodPost, "/admin/v1/plans/"+plan+"/migrate", token, map[string]any{"from_version": 1, "dry_run": dry}).Decode(t, &m)
		if m.DryRun != dry || len(m.Tenants) != 1 || m.Tenants[0].ID != old || m.Tenants[0].Name == "" || m.Tenants[0].FromVersion != 1 || m.Tenants[0].ToVersion != 3 ||
			len(m.Tenants[0].Changes) != 1 || m.Tenants[0].Changes[0].Limit != "quota:requests" || *m.Tenants[0].Changes[0].Before != 1000 || *m.Tenants[0].Changes[0].After != 3000 {
			raw, _ := json.Marshal(m)
			t.Fatalf("migrate (dry run %v): %s", dry, raw)
		}
		want := int64(1000)
		if !dry {
			want = 3000
		}
		if l, _ := requests(old); l != want {
			t.Fatalf("after migrate (dry run %v): requests %d, want %d", dry, l, want)
		}
	}
	var l struct {
		Entries []struct {
			Action  string `json:"action"`
			PlanKey string `json:"plan_key"`
		} `json:"entries"`
	}
	a.admin(t, http.MethodGet, "/admin/v1/audit?limit=10&actor="+actor, nil, http.StatusOK).Decode(t, &l)
	if len(l.Entries) != 2 || l.Entries[0].Action != "plan.migrate" || l.Entries[1].Action != "plan.migrate" || l.Entries[0].PlanKey != plan {
		t.Fatalf("audit: %+v, want both migrations of %s", l.Entries, plan)
	}

	// A price pinned to version 1: a subscription on it gets version 1's limits.
	a.admin(t, http.MethodPatch, "/admin/v1/plans/"+plan, map[string]any{"price_versions": map[string]any{legacy: 1}}, http.StatusOK)
	pinned := a.createTenant(t, plan)
	if _, err := a.Pool.Exec(t.Context(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, status) VALUES ($1, $2, 'cus_pin', $3, 'active')`,
		"sub_"+uniqueName("pin"), pinned, legacy); err != nil {
		t.Fatal(err)
	}
	if l, v := requests(pinned); l != 1000 || v != 1 {
		t.Fatalf("a subscription on the pinned price: requests %d at version %d, want 1000 at version 1", l, v)
	}

	// Bad input names the field.
	for _, c := range []struct {
		method, path string
		body         map[string]any
		field        string
	}{
		{http.MethodPatch, "/admin/v1/plans/" + plan, map[string]any{"apply": "sometimes"}, "apply"},
		{http.MethodPatch, "/admin/v1/plans/" + plan, map[string]any{"price_versions": map[string]any{"price_unknown": 1}}, "price_versions.price_unknown"},
		{http.MethodPatch, "/admin/v1/plans/" + plan, map[string]any{"price_versions": map[string]any{legacy: 9}}, "price_versions." + legacy},
		{http.MethodPost, "/admin/v1/plans/" + plan + "/migrate", map[string]any{"from_version": 9}, "from_version"},
		{http.MethodPost, "/admin/v1/plans/" + plan + "/migrate", map[string]any{}, "from_version"},
	} {
		r := a.admin(t, c.method, c.path, c.body, http.StatusBadRequest)
		if fs := r.FieldErrors(); len(fs) != 1 || fs[0] != c.field {
			t.Fatalf("%s %v: fields %v, want %s: %s", c.path, c.body, fs, c.field, r.Raw)
		}
	}
}
