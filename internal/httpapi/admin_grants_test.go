package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
	"github.com/tollgatehq/tollgate/internal/credits"
)

// grantsAPI is an api instance with credits and the audit trail wired.
func grantsAPI(t *testing.T) *testAPI {
	t.Helper()
	return newTestAPI(t, testAPIOptions{Deps: func(d *Deps) {
		d.Audit = audit.New(d.DB, d.Log)
		d.Credits = credits.NewService(d.DB, d.Entitlements, d.Catalogue, d.Log, credits.Options{})
		readers.Register(d.Audit, d.Entitlements, d.Catalogue, d.Credentials, nil, d.Credits)
	}})
}

// An admin grant is created with every field of the contract, listed with
// the tenant's other grants, and voided once; each mutation is audited
// with the grant's state before and after.
func TestGrantsAdminAPI(t *testing.T) {
	a := grantsAPI(t)
	plan := a.createPlan(t, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 100, "mode": "hard"}}})
	tenant := a.createTenant(t, plan)
	base := "/admin/v1/tenants/" + tenant + "/grants"
	eff := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	exp := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	r := a.admin(t, http.MethodPost, base, map[string]any{"meter": "requests", "amount": 5000, "priority": 1,
		"effective_at": eff.Format(time.RFC3339), "expires_at": exp.Format(time.RFC3339), "reason": "launch promo"}, http.StatusCreated)
	var g credits.Grant
	r.Decode(t, &g)
	if g.ID == "" || g.Meter != "requests" || g.Amount != 5000 || g.Remaining != 5000 || g.Priority != 1 ||
		!g.EffectiveAt.Equal(eff) || g.ExpiresAt == nil || !g.ExpiresAt.Equal(exp) || g.Source != credits.SourceAdmin ||
		g.Reason != "launch promo" || g.VoidedAt != nil || g.Status != credits.StatusActive {
		t.Fatalf("created: %s", r.Raw)
	}
	for _, k := range []string{"id", "meter", "amount", "remaining", "priority", "effective_at", "expires_at", "source", "reason", "voided_at"} {
		if _, ok := r.JSON[k]; !ok {
			t.Errorf("answer lacks %q: %s", k, r.Raw)
		}
	}
	// Defaults: effective now, never expiring, priority 50.
	r = a.admin(t, http.MethodPost, base, map[string]any{"meter": "requests", "amount": 10}, http.StatusCreated)
	var d credits.Grant
	r.Decode(t, &d)
	if d.Priority != credits.DefaultPriority || d.ExpiresAt != nil || time.Since(d.EffectiveAt) > time.Minute {
		t.Fatalf("defaults: %s", r.Raw)
	}

	l := a.admin(t, http.MethodGet, base, nil, http.StatusOK)
	var list struct{ Grants []credits.Grant }
	l.Decode(t, &list)
	if len(list.Grants) != 2 || list.Grants[0].ID != g.ID || list.Grants[1].ID != d.ID {
		t.Fatalf("list: %s", l.Raw)
	}

	v := a.admin(t, http.MethodPost, "/admin/v1/grants/"+g.ID+"/void", nil, http.StatusOK)
	var vg credits.Grant
	v.Decode(t, &vg)
	if vg.VoidedAt == nil || vg.Remaining != 0 || vg.Voided != 5000 || vg.Status != credits.StatusVoided {
		t.Fatalf("voided: %s", v.Raw)
	}
	// Again: the same grant, unchanged.
	v2 := a.admin(t, http.MethodPost, "/admin/v1/grants/"+g.ID+"/void", nil, http.StatusOK)
	var vg2 credits.Grant
	v2.Decode(t, &vg2)
	if !vg2.VoidedAt.Equal(*vg.VoidedAt) || vg2.Voided != 5000 {
		t.Fatalf("voided twice: %s", v2.Raw)
	}
	// The list shows the past grant too.
	l = a.admin(t, http.MethodGet, base, nil, http.StatusOK)
	l.Decode(t, &list)
	if len(list.Grants) != 2 || list.Grants[0].Status != credits.StatusVoided {
		t.Fatalf("list after void: %s", l.Raw)
	}
	for _, path := range []string{"/admin/v1/grants/not-a-uuid/void", "/admin/v1/grants/00000000-0000-4000-8000-000000000000/void"} {
		assertProblem(t, "void "+path, a.do(t, http.MethodPost, path, testAdminToken, nil), http.StatusNotFound)
	}

	// The trail: who created and voided which grant, with its state.
	entries, err := a.Srv.Audit.List(t.Context(), audit.Filter{TenantID: tenant})
	if err != nil {
		t.Fatal(err)
	}
	var created, voided int
	var firstBefore json.RawMessage
	for _, e := range entries {
		switch {
		case e.Action == "grant.create" && e.Target == g.ID:
			created++
			if string(e.Before) != "null" || stateField(e.After, "amount") != "5000" {
				t.Errorf("grant.create entry: before %s after %s", e.Before, e.After)
			}
		case e.Action == "grant.void" && e.Target == g.ID:
			voided++
			if stateField(e.After, "voided") != "5000" {
				t.Errorf("grant.void entry: before %s after %s", e.Before, e.After)
			}
			// Newest first: the last one seen is the first void.
			firstBefore = e.Before
		}
	}
	if stateField(firstBefore, "voided_at") != "null" || stateField(firstBefore, "remaining") != "5000" {
		t.Errorf("the first grant.void's before: %s", firstBefore)
	}
	if created != 1 || voided != 2 {
		t.Fatalf("audit: %d grant.create and %d grant.void entries for %s, want 1 and 2: %+v", created, voided, g.ID, entries)
	}
}

// Every invalid field is a 400 naming it; an unknown tenant is 404; a
// meter no plan defines is 422 as on POST /v1/check; none is a 500.
func TestGrantsRefuseBadInput(t *testing.T) {
	a := grantsAPI(t)
	plan := a.createPlan(t, map[string]any{"quotas": map[string]any{"exports": map[string]any{"limit": 10, "mode": "soft"}}})
	tenant := a.createTenant(t, plan)
	base := "/admin/v1/tenants/" + tenant + "/grants"
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	muchLater := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	bad := []struct {
		body   any
		fields []string
	}{
		{map[string]any{"meter": "requests"}, []string{"amount"}},
		{map[string]any{"meter": "requests", "amount": 0}, []string{"amount"}},
		{map[string]any{"meter": "requests", "amount": -5}, []string{"amount"}},
		{map[string]any{"meter": "requests", "amount": 1.5}, []string{"amount"}},
		{map[string]any{"meter": "requests", "amount": "lots"}, []string{"amount"}},
		{map[string]any{"meter": "requests", "amount": int64(credits.MaxAmount) + 1}, []string{"amount"}},
		{map[string]any{"meter": "Bad!", "amount": 1}, []string{"meter"}},
		{map[string]any{"amount": 1}, []string{"meter"}},
		{map[string]any{"meter": "requests", "amount": 1, "priority": 101}, []string{"priority"}},
		{map[string]any{"meter": "requests", "amount": 1, "priority": -1}, []string{"priority"}},
		{map[string]any{"meter": "requests", "amount": 1, "expires_at": past}, []string{"expires_at"}},
		{map[string]any{"meter": "requests", "amount": 1, "effective_at": muchLater, "expires_at": later}, []string{"expires_at"}},
		{map[string]any{"meter": "requests", "amount": 1, "effective_at": later, "expires_at": later}, []string{"expires_at"}},
		{map[string]any{"meter": "requests", "amount": 1, "expires_at": "tomorrow"}, []string{"expires_at"}},
		{map[string]any{"meter": "requests", "amount": 1, "reason": strings.Repeat("r", 501)}, []string{"reason"}},
		{map[string]any{"meter": "requests", "amount": 1, "reason": "a\x07b"}, []string{"reason"}},
		{map[string]any{"meter": "requests", "amount": 1, "source": "topup"}, []string{"source"}},
		// Several at once: each one named.
		{map[string]any{"meter": "Bad!", "amount": 0, "priority": 500, "expires_at": past}, []string{"meter", "amount", "priority", "expires_at"}},
	}
	for _, c := range bad {
		r := a.do(t, http.MethodPost, base, testAdminToken, c.body)
		assertProblem(t, "bad grant", r, http.StatusBadRequest)
		got := map[string]bool{}
		for _, f := range r.FieldErrors() {
			got[f] = true
		}
		for _, f := range c.fields {
			if !got[f] {
				t.Errorf("%v: %s, want errors[] naming %s", c.body, r.Raw, f)
			}
		}
	}
	for _, body := range []string{``, `null`, `[]`, `{"meter":"requests","amount":1}x`, `{"meter":"requests","amount":9223372036854775808}`, "{\"meter\":\"\u0000\",\"amount\":1}"} {
		if r := a.do(t, http.MethodPost, base, testAdminToken, body); r.Status != http.StatusBadRequest {
			t.Errorf("%q: %d %s", body, r.Status, r.Raw)
		}
	}

	r := a.do(t, http.MethodPost, base, testAdminToken, map[string]any{"meter": "no_such_meter", "amount": 1})
	assertProblem(t, "unknown meter", r, http.StatusUnprocessableEntity)
	if r.JSON["type"] != ProblemBase+"unknown-meter" || len(r.FieldErrors()) != 1 || r.FieldErrors()[0] != "meter" {
		t.Fatalf("unknown meter: %s", r.Raw)
	}
	// A meter some plan defines is fine, as is "requests" (the limiter's
	// default meter) on any plan.
	a.admin(t, http.MethodPost, base, map[string]any{"meter": "exports", "amount": 3}, http.StatusCreated)

	for _, tid := range []string{"not-a-uuid", "00000000-0000-4000-8000-000000000000"} {
		p := "/admin/v1/tenants/" + tid + "/grants"
		assertProblem(t, "POST "+p, a.do(t, http.MethodPost, p, testAdminToken, map[string]any{"meter": "requests", "amount": 1}), http.StatusNotFound)
		assertProblem(t, "GET "+p, a.do(t, http.MethodGet, p, testAdminToken, nil), http.StatusNotFound)
	}
	if r := a.do(t, http.MethodPost, base, "", map[string]any{"meter": "requests", "amount": 1}); r.Status != http.StatusUnauthorized {
		t.Fatalf("without the admin token: %d", r.Status)
	}
	if r := a.do(t, http.MethodDelete, base, testAdminToken, nil); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE %s: %d", base, r.Status)
	}
}

// A server without credits answers their routes 503, not 500 or 404.
func TestGrantsWithoutCreditsAre503(t *testing.T) {
	a := newTestAPI(t, testAPIOptions{})
	plan := a.createPlan(t, map[string]any{})
	tenant := a.createTenant(t, plan)
	assertProblem(t, "list", a.do(t, http.MethodGet, "/admin/v1/tenants/"+tenant+"/grants", testAdminToken, nil), http.StatusServiceUnavailable)
}

// A one-time price maps to a top-up (201, then 200 when replaced), is
// listed, read and deleted; bad fields are 400s naming them, an unknown
// meter 422; PUT and DELETE are audited with the mapping before and after.
func TestTopupsAdminAPI(t *testing.T) {
	a := grantsAPI(t)
	price := uniqueName("price_topup")
	path := "/admin/v1/topups/" + price
	r := a.admin(t, http.MethodPut, path, map[string]any{"meter": "requests", "amount": 10000, "expires_in": "720h"}, http.StatusCreated)
	var tp credits.Topup
	r.Decode(t, &tp)
	if tp.PriceID != price || tp.Meter != "requests" || tp.Amount != 10000 || tp.ExpiresIn == nil || *tp.ExpiresIn != "720h0m0s" || tp.Priority != credits.DefaultPriority {
		t.Fatalf("put: %s", r.Raw)
	}
	a.admin(t, http.MethodPut, path, map[string]any{"meter": "requests", "amount": 20000}, http.StatusOK)
	g := a.admin(t, http.MethodGet, path, nil, http.StatusOK)
	if g.JSON["amount"] != 20000.0 || g.JSON["expires_in"] != nil {
		t.Fatalf("get: %s", g.Raw)
	}
	l := a.admin(t, http.MethodGet, "/admin/v1/topups", nil, http.StatusOK)
	if !strings.Contains(string(l.Raw), `"price_id":"`+price+`"`) {
		t.Fatalf("list: %s", l.Raw)
	}
	for _, c := range []struct {
		body  any
		field string
	}{
		{map[string]any{"meter": "requests"}, "amount"},
		{map[string]any{"meter": "requests", "amount": -1}, "amount"},
		{map[string]any{"meter": "requests", "amount": 1, "expires_in": "a month"}, "expires_in"},
		{map[string]any{"meter": "requests", "amount": 1, "priority": 1000}, "priority"},
		{map[string]any{"meter": "BAD", "amount": 1}, "meter"},
		{map[string]any{"meter": "requests", "amount": 1, "quantity": 2}, "quantity"},
	} {
		r := a.do(t, http.MethodPut, path, testAdminToken, c.body)
		assertProblem(t, "bad top-up", r, http.StatusBadRequest)
		if f := r.FieldErrors(); len(f) == 0 || f[0] != c.field {
			t.Errorf("%v: %s, want errors[] naming %s", c.body, r.Raw, c.field)
		}
	}
	r = a.do(t, http.MethodPut, path, testAdminToken, map[string]any{"meter": "never_defined", "amount": 1})
	assertProblem(t, "unknown meter", r, http.StatusUnprocessableEntity)
	if r.JSON["type"] != ProblemBase+"unknown-meter" {
		t.Fatalf("unknown meter: %s", r.Raw)
	}
	a.admin(t, http.MethodDelete, path, nil, http.StatusNoContent)
	assertProblem(t, "deleted", a.do(t, http.MethodGet, path, testAdminToken, nil), http.StatusNotFound)
	assertProblem(t, "deleted twice", a.do(t, http.MethodDelete, path, testAdminToken, nil), http.StatusNotFound)

	entries, err := a.Srv.Audit.List(t.Context(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range entries {
		if e.Target == price {
			seen[e.Action]++
			if e.Action == "topup.delete" && (stateField(e.Before, "amount") != "20000" || string(e.After) != "null") {
				t.Errorf("topup.delete: before %s after %s", e.Before, e.After)
			}
		}
	}
	if seen["topup.put"] != 2 || seen["topup.delete"] != 1 {
		t.Fatalf("audit of %s: %v", price, seen)
	}
}

// Explain lists the grants that can still be drawn, per meter in draw
// order (priority, earliest expiry, none last, creation), pending ones
// included and voided ones not, beside the limits it explains.
func TestExplainListsGrantsInDrawOrder(t *testing.T) {
	a := grantsAPI(t)
	plan := a.createPlan(t, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 100, "mode": "hard"},
		"exports": map[string]any{"limit": 5, "mode": "soft"}}})
	tenant := a.createTenant(t, plan)
	base := "/admin/v1/tenants/" + tenant + "/grants"
	grant := func(body map[string]any) string {
		t.Helper()
		var g credits.Grant
		a.admin(t, http.MethodPost, base, body, http.StatusCreated).Decode(t, &g)
		return g.ID
	}
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	later := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	never := grant(map[string]any{"meter": "requests", "amount": 10, "priority": 5})
	expiring := grant(map[string]any{"meter": "requests", "amount": 10, "priority": 5, "expires_at": later})
	first := grant(map[string]any{"meter": "requests", "amount": 10, "priority": 1})
	soonest := grant(map[string]any{"meter": "requests", "amount": 10, "priority": 5, "expires_at": soon})
	pending := grant(map[string]any{"meter": "requests", "amount": 10, "priority": 90, "effective_at": soon})
	export := grant(map[string]any{"meter": "exports", "amount": 3})
	voided := grant(map[string]any{"meter": "requests", "amount": 10, "priority": 0})
	a.admin(t, http.MethodPost, "/admin/v1/grants/"+voided+"/void", nil, http.StatusOK)

	var e struct {
		Limits []map[string]any
		Grants []credits.Grant
	}
	a.admin(t, http.MethodGet, "/admin/v1/tenants/"+tenant+"/explain", nil, http.StatusOK).Decode(t, &e)
	if len(e.Limits) == 0 {
		t.Fatal("explain lost its limits")
	}
	var got []string
	for _, g := range e.Grants {
		got = append(got, g.ID)
	}
	want := []string{export, first, soonest, expiring, never, pending}
	if !slices.Equal(got, want) {
		t.Fatalf("grants %v, want %v (exports, then requests in draw order)", got, want)
	}
	if e.Grants[5].Status != credits.StatusPending {
		t.Errorf("the pending grant is %s", e.Grants[5].Status)
	}
}
