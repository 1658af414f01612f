package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

func TestOverridesOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, nil, map[string]any{"requests": map[string]any{"limit": 100, "mode": "hard"}})
	id, key := in.newTenant(t, plan)
	base := "/admin/v1/tenants/" + id + "/overrides"

	quota := func() map[string]any {
		a := in.call(t, http.MethodGet, "/v1/entitlements", key, nil)
		q, _ := a.body["quotas"].(map[string]any)
		r, _ := q["requests"].(map[string]any)
		return r
	}
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	a := in.admin(t, http.MethodPost, base, map[string]any{"meter": "requests", "extra": 50, "reason": "launch", "expires_at": exp}, http.StatusCreated)
	oid, _ := a.body["id"].(string)
	if oid == "" || a.body["extra"] != 50.0 || a.body["active"] != true {
		t.Fatalf("created: %s", a.raw)
	}
	if q := quota(); q["limit"] != 150.0 {
		t.Fatalf("limit with the override = %v, want 150", q)
	}
	in.admin(t, http.MethodPost, base, map[string]any{"meter": "exports", "limit": 7, "mode": "soft"}, http.StatusCreated)
	l := in.admin(t, http.MethodGet, base, nil, http.StatusOK)
	if list, _ := l.body["overrides"].([]any); len(list) != 2 {
		t.Fatalf("list: %s", l.raw)
	}

	bad := []struct {
		body  any
		field string
	}{
		{map[string]any{"meter": "Bad!", "extra": 1}, "meter"},
		{map[string]any{"meter": "requests", "extra": 1, "limit": 2}, "limit"},
		{map[string]any{"meter": "requests", "mode": "strict"}, "mode"},
		{map[string]any{"meter": "requests"}, "extra"},
		{map[string]any{"meter": "requests", "extra": 1, "expires_at": "2000-01-01T00:00:00Z"}, "expires_at"},
		{map[string]any{"meter": "requests", "extra": "many"}, "extra"},
		{map[string]any{"meter": "requests", "extra": 1, "colour": "red"}, "colour"},
	}
	for _, c := range bad {
		a := in.call(t, http.MethodPost, base, limitTestAdminToken, c.body)
		if a.status != http.StatusBadRequest || !errorFields(a)[c.field] {
			t.Errorf("%v: %d %s, want 400 naming %s", c.body, a.status, a.raw, c.field)
		}
	}
	for _, path := range []string{"/admin/v1/tenants/not-a-uuid/overrides", "/admin/v1/tenants/00000000-0000-4000-8000-000000000000/overrides"} {
		if a := in.call(t, http.MethodPost, path, limitTestAdminToken, map[string]any{"meter": "requests", "extra": 1}); a.status != http.StatusNotFound {
			t.Errorf("POST %s: %d %s", path, a.status, a.raw)
		}
		if a := in.call(t, http.MethodGet, path, limitTestAdminToken, nil); a.status != http.StatusNotFound {
			t.Errorf("GET %s: %d %s", path, a.status, a.raw)
		}
	}
	if a := in.call(t, http.MethodPost, base, "", map[string]any{"meter": "requests", "extra": 1}); a.status != http.StatusUnauthorized {
		t.Fatalf("without the admin token: %d", a.status)
	}
	// Another tenant's override is not found.
	other, _ := in.newTenant(t, plan)
	if a := in.call(t, http.MethodDelete, "/admin/v1/tenants/"+other+"/overrides/"+oid, limitTestAdminToken, nil); a.status != http.StatusNotFound {
		t.Fatalf("delete through another tenant: %d %s", a.status, a.raw)
	}
	if a := in.call(t, http.MethodDelete, base+"/not-a-uuid", limitTestAdminToken, nil); a.status != http.StatusNotFound {
		t.Fatalf("delete a bad id: %d %s", a.status, a.raw)
	}
	in.admin(t, http.MethodDelete, base+"/"+oid, nil, http.StatusNoContent)
	in.admin(t, http.MethodDelete, base+"/"+oid, nil, http.StatusNotFound)
	if q := quota(); q["limit"] != 100.0 {
		t.Fatalf("limit after delete = %v, want 100", q)
	}
}
