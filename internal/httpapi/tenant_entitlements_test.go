package httpapi

import (
	"net/http"
	"testing"
	"time"
)

func TestEntitlementsFollowPlanChange(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	b := newTestAPI(t, testAPIOptions{Prefix: a.Prefix})
	small := a.createPlan(t, map[string]any{"rate": map[string]any{"per_second": 5, "burst": 10},
		"quotas": map[string]any{"requests": map[string]any{"limit": 1000}}})
	big := a.createPlan(t, map[string]any{"rate": map[string]any{"per_second": 100, "burst": 1000}, "concurrency": 50,
		"quotas":   map[string]any{"requests": map[string]any{"limit": 1000000}, "exports": map[string]any{"limit": 500, "mode": "soft"}},
		"features": []string{"exports", "sso"}})
	tenant := a.createTenant(t, small)
	key, _ := a.issueKey(t, tenant)

	r := b.do(t, "GET", "/v1/entitlements", key, nil)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	for _, f := range []string{"tenant_id", "plan", "status", "features", "rate", "concurrency", "quotas", "period", "version"} {
		if _, ok := r.JSON[f]; !ok {
			t.Fatalf("field %q missing: %s", f, r.Raw)
		}
	}
	if r.JSON["plan"] != small || r.JSON["version"] != float64(1) || r.JSON["status"] != "active" || r.JSON["concurrency"] != nil {
		t.Fatalf("before: %s", r.Raw)
	}
	period := r.JSON["period"].(map[string]any)
	startAt, err1 := time.Parse(time.RFC3339, period["start"].(string))
	endAt, err2 := time.Parse(time.RFC3339, period["end"].(string))
	if err1 != nil || err2 != nil || !endAt.After(time.Now()) || startAt.After(time.Now()) {
		t.Fatalf("period: %s", r.Raw)
	}

	d := a.admin(t, "PUT", "/admin/v1/tenants/"+tenant+"/plan", map[string]any{"plan": big}, http.StatusOK)
	if d.JSON["plan"] != big || d.JSON["entitlement_version"] != float64(2) {
		t.Fatalf("change: %s", d.Raw)
	}
	// Visible at once on the instance that made it and on the other one.
	for name, inst := range map[string]*testAPI{"same": a, "other": b} {
		r := inst.do(t, "GET", "/v1/entitlements", key, nil)
		if r.JSON["plan"] != big || r.JSON["version"] != float64(2) || r.JSON["concurrency"] != float64(50) {
			t.Fatalf("%s instance after the change: %s", name, r.Raw)
		}
		if q := r.JSON["quotas"].(map[string]any)["exports"].(map[string]any); q["limit"] != float64(500) || q["mode"] != "soft" {
			t.Fatalf("quotas: %s", r.Raw)
		}
	}
	// A plan PATCH reaches the tenant too.
	a.admin(t, "PATCH", "/admin/v1/plans/"+big, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 7}}}, http.StatusOK)
	r = b.do(t, "GET", "/v1/entitlements", key, nil)
	if r.JSON["version"] != float64(3) || r.JSON["quotas"].(map[string]any)["requests"].(map[string]any)["limit"] != float64(7) {
		t.Fatalf("after patch: %s", r.Raw)
	}
	var n int
	if err := a.Pool.QueryRow(t.Context(), `SELECT count(*) FROM entitlement_versions WHERE tenant_id = $1`, tenant).Scan(&n); err != nil || n != 3 {
		t.Fatalf("entitlement_versions: %d %v", n, err)
	}
}
