package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestAdminRequiresToken(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	for _, c := range []struct{ method, path string }{
		{"GET", "/admin/v1/plans"}, {"POST", "/admin/v1/plans"}, {"GET", "/admin/v1/tenants"},
		{"DELETE", "/admin/v1/api-keys/00000000-0000-0000-0000-000000000000"}, {"GET", "/admin/v1/no-such-route"},
	} {
		assertProblem(t, "no token "+c.path, a.do(t, c.method, c.path, "", nil), http.StatusUnauthorized)
		assertProblem(t, "wrong token "+c.path, a.do(t, c.method, c.path, "tga_wrong", nil), http.StatusUnauthorized)
		assertProblem(t, "API key as admin token "+c.path, a.do(t, c.method, c.path, "tg_"+strings.Repeat("a", 43), nil), http.StatusUnauthorized)
	}
	r := a.do(t, "GET", "/admin/v1/plans", "", nil)
	if strings.Contains(string(r.Raw), testAdminToken) {
		t.Fatal("the admin token leaked into a response")
	}
}

func TestPlansCreateGetListPatch(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	key := uniqueName("pro")
	price := uniqueName("price")
	r := a.admin(t, "POST", "/admin/v1/plans", map[string]any{
		"key": key, "name": "Pro", "stripe_price_id": price,
		"rate": map[string]any{"per_second": 20, "burst": 200}, "concurrency": 10,
		"quotas":   map[string]any{"requests": map[string]any{"limit": 100000, "mode": "hard"}, "exports": map[string]any{"limit": 50, "mode": "soft"}},
		"features": []string{"sso", "exports"},
	}, http.StatusCreated)
	if r.JSON["key"] != key || r.JSON["stripe_price_id"] != price || r.JSON["concurrency"] != float64(10) {
		t.Fatalf("created: %s", r.Raw)
	}
	if rate := r.JSON["rate"].(map[string]any); rate["per_second"] != float64(20) || rate["burst"] != float64(200) {
		t.Fatalf("rate: %s", r.Raw)
	}
	if q := r.JSON["quotas"].(map[string]any)["exports"].(map[string]any); q["limit"] != float64(50) || q["mode"] != "soft" {
		t.Fatalf("quotas: %s", r.Raw)
	}
	if loc := r.Header.Get("Location"); loc != "/admin/v1/plans/"+key {
		t.Fatalf("Location %q", loc)
	}

	got := a.admin(t, "GET", "/admin/v1/plans/"+key, nil, http.StatusOK)
	if got.JSON["name"] != "Pro" {
		t.Fatalf("get: %s", got.Raw)
	}
	var list struct {
		Plans []struct{ Key string } `json:"plans"`
	}
	a.admin(t, "GET", "/admin/v1/plans", nil, http.StatusOK).Decode(t, &list)
	if !slices.ContainsFunc(list.Plans, func(p struct{ Key string }) bool { return p.Key == key }) {
		t.Fatalf("list misses %s", key)
	}

	// PATCH merges: absent fields stay, null makes unlimited, a null meter loses its quota.
	p := a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{
		"rate": map[string]any{"burst": 300}, "concurrency": nil, "quotas": map[string]any{"exports": nil},
	}, http.StatusOK)
	rate := p.JSON["rate"].(map[string]any)
	quotas := p.JSON["quotas"].(map[string]any)
	if rate["burst"] != float64(300) || rate["per_second"] != float64(20) || p.JSON["concurrency"] != nil ||
		quotas["exports"] != nil || quotas["requests"] == nil || p.JSON["name"] != "Pro" {
		t.Fatalf("patched: %s", p.Raw)
	}
	if p.JSON["quota_window"] != "month" || quotas["requests"].(map[string]any)["stripe_report"] != "overage" {
		t.Fatalf("defaults: quota_window %v, stripe_report %v, want month and overage: %s", p.JSON["quota_window"], quotas["requests"], p.Raw)
	}
}

// A plan chooses how its quotas reset (monthly, or once per billing period)
// and what its Stripe meters are sent (overage, or total usage).
func TestPlanQuotaWindowAndStripeReport(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	key := uniqueName("annual")
	r := a.admin(t, "POST", "/admin/v1/plans", map[string]any{
		"key": key, "quota_window": "billing_period",
		"quotas": map[string]any{"tokens": map[string]any{"limit": 10, "mode": "soft", "stripe_meter_event": "tokens", "stripe_report": "total"}},
	}, http.StatusCreated)
	q := r.JSON["quotas"].(map[string]any)["tokens"].(map[string]any)
	if r.JSON["quota_window"] != "billing_period" || q["stripe_report"] != "total" {
		t.Fatalf("created: %s", r.Raw)
	}
	p := a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"quota_window": "month"}, http.StatusOK)
	if p.JSON["quota_window"] != "month" || p.JSON["quotas"].(map[string]any)["tokens"].(map[string]any)["stripe_report"] != "total" {
		t.Fatalf("patched: %s", p.Raw)
	}
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"key": uniqueName("p"), "quota_window": "year"}, "quota_window"},
		{map[string]any{"key": uniqueName("p"), "quotas": map[string]any{"tokens": map[string]any{"limit": 1, "stripe_report": "all"}}}, "quotas.tokens.stripe_report"},
	} {
		r := a.do(t, "POST", "/admin/v1/plans", testAdminToken, tc.body)
		assertProblem(t, tc.field, r, http.StatusBadRequest)
		if !slices.Equal(r.FieldErrors(), []string{tc.field}) {
			t.Fatalf("fields %v, want [%s]: %s", r.FieldErrors(), tc.field, r.Raw)
		}
	}
	r = a.do(t, "PATCH", "/admin/v1/plans/"+key, testAdminToken, map[string]any{"quota_window": 12})
	assertProblem(t, "patch wrong type", r, http.StatusBadRequest)
	if !slices.Equal(r.FieldErrors(), []string{"quota_window"}) {
		t.Fatalf("fields %v: %s", r.FieldErrors(), r.Raw)
	}
}

func TestPlanWindowsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	key := uniqueName("p")
	r := a.admin(t, "POST", "/admin/v1/plans", map[string]any{"key": key, "windows": []any{
		map[string]any{"name": "hourly", "limit": 5000, "length": "1h", "kind": "fixed"},
		map[string]any{"name": "minute", "limit": 60, "length": "60s"}}}, http.StatusCreated)
	want := `[{"kind":"fixed","length":"1h","limit":5000,"name":"hourly"},{"kind":"sliding","length":"1m","limit":60,"name":"minute"}]`
	if got, _ := json.Marshal(r.JSON["windows"]); string(got) != want {
		t.Fatalf("windows %s, want %s", got, want)
	}
	r = a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"windows": []any{map[string]any{"name": "daily", "limit": 9, "length": "24h"}}}, http.StatusOK)
	want = `[{"kind":"sliding","length":"24h","limit":9,"name":"daily"}]`
	if got, _ := json.Marshal(a.admin(t, "GET", "/admin/v1/plans/"+key, nil, http.StatusOK).JSON["windows"]); string(got) != want {
		t.Fatalf("patched windows %s, want %s (patch answered %s)", got, want, r.Raw)
	}
}

func TestPlanErrors(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	taken := a.createPlan(t, map[string]any{"stripe_price_id": uniqueName("price")})
	takenPrice := a.admin(t, "GET", "/admin/v1/plans/"+taken, nil, http.StatusOK).JSON["stripe_price_id"]
	cases := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		fields []string
	}{
		{"malformed JSON", "POST", "/admin/v1/plans", `{"key": "x",`, 400, nil},
		{"not an object", "POST", "/admin/v1/plans", `[1,2]`, 400, nil},
		{"empty body", "POST", "/admin/v1/plans", "", 400, nil},
		{"trailing data", "POST", "/admin/v1/plans", `{"key":"a"} {"key":"b"}`, 400, nil},
		{"unknown field", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "colour": "red"}, 400, []string{"colour"}},
		{"invalid plan key", "POST", "/admin/v1/plans", map[string]any{"key": "Not OK!"}, 400, []string{"key"}},
		{"missing plan key", "POST", "/admin/v1/plans", map[string]any{"name": "x"}, 400, []string{"key"}},
		{"negative rate", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "rate": map[string]any{"per_second": -1, "burst": 5}}, 400, []string{"rate.per_second"}},
		{"negative burst", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "rate": map[string]any{"per_second": 1, "burst": -5}}, 400, []string{"rate.burst"}},
		{"negative concurrency", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "concurrency": -3}, 400, []string{"concurrency"}},
		{"negative quota", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "quotas": map[string]any{"requests": map[string]any{"limit": -1}}}, 400, []string{"quotas.requests.limit"}},
		{"bad quota mode", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "quotas": map[string]any{"requests": map[string]any{"limit": 1, "mode": "strict"}}}, 400, []string{"quotas.requests.mode"}},
		{"wrong type", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "rate": map[string]any{"per_second": 1, "burst": "lots"}}, 400, []string{"rate.burst"}},
		{"fractional burst", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "rate": map[string]any{"per_second": 1, "burst": 1.5}}, 400, []string{"rate.burst"}},
		{"bad windows", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "windows": []any{
			map[string]any{"name": "hourly", "limit": 0, "length": "1h"},
			map[string]any{"name": "hourly", "limit": 5, "length": "2d", "kind": "rolling"}}}, 400,
			[]string{"windows[0].limit", "windows[1].name", "windows[1].length", "windows[1].kind"}},
		{"window limit not a number", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "windows": []any{
			map[string]any{"name": "hourly", "limit": "lots", "length": "1h"}}}, 400, []string{"windows[0].limit"}},
		{"unknown window field", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "windows": []any{
			map[string]any{"name": "hourly", "limit": 1, "length": "1h"}, map[string]any{"name": "daily", "limit": 1, "length": "24h", "unit": "day"}}}, 400, []string{"windows[1].unit"}},
		{"patch bad window", "PATCH", "/admin/v1/plans/" + taken, map[string]any{"windows": []any{map[string]any{"name": "x", "limit": 1, "length": "0s"}}}, 400, []string{"windows[0].length"}},
		{"duplicate plan key", "POST", "/admin/v1/plans", map[string]any{"key": taken}, 409, []string{"key"}},
		{"duplicate price", "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("p"), "stripe_price_id": takenPrice}, 409, []string{"stripe_price_id"}},
		{"unknown plan", "GET", "/admin/v1/plans/no-such-plan", nil, 404, nil},
		{"malformed plan key in URL", "GET", "/admin/v1/plans/NO%20SUCH", nil, 404, nil},
		{"patch unknown plan", "PATCH", "/admin/v1/plans/no-such-plan", map[string]any{"name": "x"}, 404, nil},
		{"patch renames key", "PATCH", "/admin/v1/plans/" + taken, map[string]any{"key": "other"}, 400, []string{"key"}},
		{"patch negative limit", "PATCH", "/admin/v1/plans/" + taken, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": -10}}}, 400, []string{"quotas.requests.limit"}},
		{"patch malformed", "PATCH", "/admin/v1/plans/" + taken, `{"name":`, 400, nil},
		{"wrong method", "DELETE", "/admin/v1/plans", nil, 405, nil},
		{"wrong method on item", "POST", "/admin/v1/plans/" + taken, nil, 405, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(t, tc.method, tc.path, testAdminToken, tc.body)
			assertProblem(t, tc.name, r, tc.status)
			if tc.fields != nil && !slices.Equal(r.FieldErrors(), tc.fields) {
				t.Fatalf("fields %v, want %v: %s", r.FieldErrors(), tc.fields, r.Raw)
			}
		})
	}
	// The failed patch changed nothing.
	if got := a.admin(t, "GET", "/admin/v1/plans/"+taken, nil, 200); got.JSON["key"] != taken {
		t.Fatalf("plan changed: %s", got.Raw)
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	big := `{"key":"big","name":"` + strings.Repeat("x", 70<<10) + `"}`
	assertProblem(t, "plan body over 64K", a.do(t, "POST", "/admin/v1/plans", testAdminToken, big), http.StatusRequestEntityTooLarge)
	assertProblem(t, "tenant body over 64K", a.do(t, "POST", "/admin/v1/tenants", testAdminToken, big), http.StatusRequestEntityTooLarge)
	// Without Content-Length (chunked), the limit is found while reading:
	// both through the plan handler and through the shared decodeJSON
	// (overrides), which must answer 413 too, not 400 "malformed JSON".
	tenant := a.createTenant(t, a.createPlan(t, map[string]any{"name": "Chunky"}))
	for _, path := range []string{"/admin/v1/plans", "/admin/v1/tenants/" + tenant + "/overrides"} {
		req, err := http.NewRequestWithContext(t.Context(), "POST", a.URL+path, io.MultiReader(strings.NewReader(big)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked body over 64K to %s: %d, want 413", path, res.StatusCode)
		}
	}
}

func TestUnknownRouteAndWrongMethod(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	assertProblem(t, "unknown route", a.do(t, "GET", "/no/such/route", "", nil), http.StatusNotFound)
	assertProblem(t, "unknown admin route", a.do(t, "GET", "/admin/v1/nope", testAdminToken, nil), http.StatusNotFound)
	assertProblem(t, "wrong method on tenant", a.do(t, "DELETE", "/admin/v1/tenants/00000000-0000-0000-0000-000000000000", testAdminToken, nil), http.StatusMethodNotAllowed)
	key, _ := a.issueKey(t, a.createTenant(t, a.createPlan(t, map[string]any{})))
	r := a.do(t, "POST", "/v1/entitlements", key, nil)
	assertProblem(t, "wrong method on /v1/entitlements", r, http.StatusMethodNotAllowed)
	if r.Header.Get("Allow") == "" {
		t.Fatal("405 without Allow")
	}
}

// A plan is public (offered to tenants on their dashboard) unless created or
// patched with "public": false; a patch without the field leaves it, null
// sets it back to the default, and anything but a boolean is a 400 naming
// "public" that changes nothing.
func TestPlanPublicField(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	pub := a.admin(t, "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("pub")}, http.StatusCreated)
	if pub.JSON["public"] != true {
		t.Fatalf("a plan created without public must be public: %s", pub.Raw)
	}
	key := uniqueName("internal")
	in := a.admin(t, "POST", "/admin/v1/plans", map[string]any{"key": key, "public": false}, http.StatusCreated)
	if in.JSON["public"] != false {
		t.Fatalf("created with public false: %s", in.Raw)
	}
	if got := a.admin(t, "GET", "/admin/v1/plans/"+key, nil, http.StatusOK); got.JSON["public"] != false {
		t.Fatalf("GET: %s", got.Raw)
	}
	var list struct {
		Plans []struct {
			Key    string `json:"key"`
			Public *bool  `json:"public"`
		} `json:"plans"`
	}
	a.admin(t, "GET", "/admin/v1/plans", nil, http.StatusOK).Decode(t, &list)
	for _, p := range list.Plans {
		if p.Public == nil || (p.Key == key) == *p.Public {
			t.Fatalf("list: plan %s public %v", p.Key, p.Public)
		}
	}
	if p := a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"name": "Internal"}, http.StatusOK); p.JSON["public"] != false {
		t.Fatalf("a patch without public must keep it: %s", p.Raw)
	}
	for _, bad := range []any{"yes", 1, map[string]any{}, []any{true}} {
		for _, r := range []apiResp{
			a.do(t, "PATCH", "/admin/v1/plans/"+key, testAdminToken, map[string]any{"public": bad}),
			a.do(t, "POST", "/admin/v1/plans", testAdminToken, map[string]any{"key": uniqueName("bad"), "public": bad}),
		} {
			assertProblem(t, fmt.Sprintf("public %v", bad), r, http.StatusBadRequest)
			if !slices.Equal(r.FieldErrors(), []string{"public"}) {
				t.Fatalf("public %v: fields %v, want [public]: %s", bad, r.FieldErrors(), r.Raw)
			}
		}
	}
	if got := a.admin(t, "GET", "/admin/v1/plans/"+key, nil, http.StatusOK); got.JSON["public"] != false {
		t.Fatalf("a refused patch changed public: %s", got.Raw)
	}
	if p := a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"public": true}, http.StatusOK); p.JSON["public"] != true {
		t.Fatalf("patch public true: %s", p.Raw)
	}
	a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"public": false}, http.StatusOK)
	if p := a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"public": nil}, http.StatusOK); p.JSON["public"] != true {
		t.Fatalf("patch public null must restore the default (true): %s", p.Raw)
	}
}
