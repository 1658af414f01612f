package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
)

// Tenants carry the backend's own id: created with it, found by it, edited
// and removed, a duplicate a 409 naming the field, a bad one a 400 naming
// it, and every edit in the audit trail.
func TestTenantExternalIDAdminAPI(t *testing.T) {
	var trail *audit.Log
	a := newTestAPI(t, testAPIOptions{Deps: func(d *Deps) {
		trail = audit.New(d.DB, d.Log)
		readers.Register(trail, d.Entitlements, d.Catalogue, d.Credentials, nil, nil)
		d.Audit = trail
	}})
	plan := a.createPlan(t, map[string]any{})
	ext := uniqueName("acct:42@eu")
	r := a.admin(t, "POST", "/admin/v1/tenants", map[string]any{"name": "Acme", "plan": plan, "external_id": ext}, http.StatusCreated)
	id, _ := r.JSON["id"].(string)
	if r.JSON["external_id"] != ext {
		t.Fatalf("created: %s", r.Raw)
	}
	if d := a.admin(t, "GET", "/admin/v1/tenants/"+id, nil, http.StatusOK); d.JSON["external_id"] != ext {
		t.Fatalf("detail: %s", d.Raw)
	}
	plain := a.createTenant(t, plan)
	if d := a.admin(t, "GET", "/admin/v1/tenants/"+plain, nil, http.StatusOK); d.JSON["external_id"] != nil || !strings.Contains(string(d.Raw), `"external_id":null`) {
		t.Fatalf("a tenant without one shows null: %s", d.Raw)
	}
	for _, q := range []string{"external_id=" + url.QueryEscape(ext), "q=" + url.QueryEscape(ext)} {
		l := a.admin(t, "GET", "/admin/v1/tenants?"+q, nil, http.StatusOK)
		ts, _ := l.JSON["tenants"].([]any)
		if len(ts) != 1 || ts[0].(map[string]any)["id"] != id {
			t.Fatalf("list ?%s: %s", q, l.Raw)
		}
	}
	// Case-sensitive: another case finds nothing.
	if l := a.admin(t, "GET", "/admin/v1/tenants?external_id="+url.QueryEscape(strings.ToUpper(ext)), nil, http.StatusOK); len(l.JSON["tenants"].([]any)) != 0 {
		t.Fatalf("upper case found: %s", l.Raw)
	}
	for _, q := range []string{"external_id=", "external_id=has%20space", "external_id=" + strings.Repeat("x", 129)} {
		bad := a.admin(t, "GET", "/admin/v1/tenants?"+q, nil, http.StatusBadRequest)
		assertProblem(t, q, bad, http.StatusBadRequest)
		if !slices.Equal(bad.FieldErrors(), []string{"external_id"}) {
			t.Fatalf("?%s: %s", q, bad.Raw)
		}
	}

	// Create: taken, invalid.
	dup := a.admin(t, "POST", "/admin/v1/tenants", map[string]any{"name": "B", "plan": plan, "external_id": ext}, http.StatusConflict)
	assertProblem(t, "duplicate", dup, http.StatusConflict)
	if !slices.Equal(dup.FieldErrors(), []string{"external_id"}) {
		t.Fatalf("duplicate: %s", dup.Raw)
	}
	for _, bad := range []any{"a b", "{x}", "a/b", strings.Repeat("y", 129), 42} {
		r := a.admin(t, "POST", "/admin/v1/tenants", map[string]any{"name": "B", "plan": plan, "external_id": bad}, http.StatusBadRequest)
		assertProblem(t, "create bad", r, http.StatusBadRequest)
		if !slices.Equal(r.FieldErrors(), []string{"external_id"}) {
			t.Fatalf("create %v: %s", bad, r.Raw)
		}
	}

	// Edit: set, rename alone, conflict, invalid, remove.
	other := uniqueName("other")
	p := a.admin(t, "PATCH", "/admin/v1/tenants/"+plain, map[string]any{"external_id": other}, http.StatusOK)
	if p.JSON["external_id"] != other || p.JSON["name"] == nil {
		t.Fatalf("set: %s", p.Raw)
	}
	p = a.admin(t, "PATCH", "/admin/v1/tenants/"+plain, map[string]any{"name": "Renamed"}, http.StatusOK)
	if p.JSON["external_id"] != other || p.JSON["name"] != "Renamed" {
		t.Fatalf("rename keeps the external id: %s", p.Raw)
	}
	c := a.admin(t, "PATCH", "/admin/v1/tenants/"+plain, map[string]any{"external_id": ext}, http.StatusConflict)
	assertProblem(t, "patch conflict", c, http.StatusConflict)
	if !slices.Equal(c.FieldErrors(), []string{"external_id"}) {
		t.Fatalf("patch conflict: %s", c.Raw)
	}
	for _, bad := range []any{"", "a b", 7, true, []string{"x"}} {
		r := a.admin(t, "PATCH", "/admin/v1/tenants/"+plain, map[string]any{"external_id": bad}, http.StatusBadRequest)
		assertProblem(t, "patch bad", r, http.StatusBadRequest)
		if !slices.Equal(r.FieldErrors(), []string{"external_id"}) {
			t.Fatalf("patch %v: %s", bad, r.Raw)
		}
	}
	if r := a.admin(t, "PATCH", "/admin/v1/tenants/"+plain, map[string]any{"plan": "x"}, http.StatusBadRequest); r.JSON["status"] != float64(400) {
		t.Fatalf("unknown field: %s", r.Raw)
	}
	assertProblem(t, "unknown tenant", a.admin(t, "PATCH", "/admin/v1/tenants/00000000-0000-4000-8000-000000000000", map[string]any{"name": "x"}, http.StatusNotFound), http.StatusNotFound)
	p = a.admin(t, "PATCH", "/admin/v1/tenants/"+plain, `{"external_id": null}`, http.StatusOK)
	if p.JSON["external_id"] != nil || !strings.Contains(string(p.Raw), `"external_id":null`) {
		t.Fatalf("remove: %s", p.Raw)
	}
	// The freed id can be taken again.
	a.admin(t, "PATCH", "/admin/v1/tenants/"+id, map[string]any{"external_id": other}, http.StatusOK)

	es, err := trail.List(t.Context(), audit.Filter{TenantID: plain})
	if err != nil {
		t.Fatal(err)
	}
	var edits []string
	for _, e := range es {
		if e.Action == "tenant.edit" {
			edits = append(edits, stateField(e.Before, "external_id")+"→"+stateField(e.After, "external_id"))
		}
	}
	slices.Reverse(edits) // oldest first
	want := []string{`null→"` + other + `"`, `"` + other + `"→"` + other + `"`, `"` + other + `"→null`}
	if !slices.Equal(edits, want) {
		t.Fatalf("audited edits = %v, want %v", edits, want)
	}
}
