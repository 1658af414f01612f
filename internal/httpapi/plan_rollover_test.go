package httpapi

import (
	"net/http"
	"testing"
)

// A quota's rollover is validated field by field, stored, answered, kept
// by patches that do not name it and removed by one that sets it null.
func TestPlanQuotaRollover(t *testing.T) {
	a := newTestAPI(t, testAPIOptions{})
	key := a.createPlan(t, map[string]any{"quotas": map[string]any{
		"requests": map[string]any{"limit": 10000, "mode": "hard", "rollover": map[string]any{"max": 2000, "expires_after_periods": 2}},
		"exports":  map[string]any{"limit": 50, "rollover": map[string]any{"max": 10}},
	}})
	rollover := func(r apiResp, meter string) map[string]any {
		q, _ := r.JSON["quotas"].(map[string]any)
		m, _ := q[meter].(map[string]any)
		ro, _ := m["rollover"].(map[string]any)
		return ro
	}
	g := a.admin(t, http.MethodGet, "/admin/v1/plans/"+key, nil, http.StatusOK)
	if ro := rollover(g, "requests"); ro["max"] != 2000.0 || ro["expires_after_periods"] != 2.0 {
		t.Fatalf("requests rollover: %s", g.Raw)
	}
	if ro := rollover(g, "exports"); ro["max"] != 10.0 || ro["expires_after_periods"] != 1.0 {
		t.Fatalf("exports rollover (default one period): %s", g.Raw)
	}
	p := a.admin(t, http.MethodPatch, "/admin/v1/plans/"+key, map[string]any{"name": "renamed"}, http.StatusOK)
	if ro := rollover(p, "requests"); ro["max"] != 2000.0 {
		t.Fatalf("a patch not naming it dropped it: %s", p.Raw)
	}
	p = a.admin(t, http.MethodPatch, "/admin/v1/plans/"+key, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 10000, "rollover": nil}}}, http.StatusOK)
	if ro := rollover(p, "requests"); ro != nil {
		t.Fatalf("rollover set null stayed: %s", p.Raw)
	}
	for _, c := range []struct {
		ro    any
		field string
	}{
		{map[string]any{}, "quotas.requests.rollover.max"},
		{map[string]any{"max": 0}, "quotas.requests.rollover.max"},
		{map[string]any{"max": -3}, "quotas.requests.rollover.max"},
		{map[string]any{"max": 5, "expires_after_periods": 0}, "quotas.requests.rollover.expires_after_periods"},
		{map[string]any{"max": 5, "expires_after_periods": 13}, "quotas.requests.rollover.expires_after_periods"},
	} {
		r := a.do(t, http.MethodPost, "/admin/v1/plans", testAdminToken, map[string]any{"key": uniqueName("plan"),
			"quotas": map[string]any{"requests": map[string]any{"limit": 1, "rollover": c.ro}}})
		assertProblem(t, "bad rollover", r, http.StatusBadRequest)
		if f := r.FieldErrors(); len(f) != 1 || f[0] != c.field {
			t.Errorf("%v: %s, want errors[] naming %s", c.ro, r.Raw, c.field)
		}
	}
	r := a.do(t, http.MethodPost, "/admin/v1/plans", testAdminToken, map[string]any{"key": uniqueName("plan"),
		"quotas": map[string]any{"requests": map[string]any{"limit": 1, "rollover": map[string]any{"max": 1, "after": 2}}}})
	assertProblem(t, "unknown rollover field", r, http.StatusBadRequest)
}
