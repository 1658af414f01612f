package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

func TestTenantsCreateListGet(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	plan := a.createPlan(t, map[string]any{"rate": map[string]any{"per_second": 5, "burst": 10},
		"quotas": map[string]any{"requests": map[string]any{"limit": 1000}}, "features": []string{"sso"}})
	cus := uniqueName("cus")
	r := a.admin(t, "POST", "/admin/v1/tenants", map[string]any{"name": "Acme", "plan": plan, "stripe_customer_id": cus}, http.StatusCreated)
	id, _ := r.JSON["id"].(string)
	if r.JSON["name"] != "Acme" || r.JSON["plan"] != plan || r.JSON["stripe_customer_id"] != cus || r.JSON["entitlement_version"] != float64(1) {
		t.Fatalf("created: %s", r.Raw)
	}

	// Usage of the current period: durable figure from Postgres.
	d := a.admin(t, "GET", "/admin/v1/tenants/"+id, nil, http.StatusOK)
	ent := d.JSON["entitlements"].(map[string]any)
	start, _ := time.Parse(time.RFC3339Nano, ent["period_start"].(string))
	end, _ := time.Parse(time.RFC3339Nano, ent["period_end"].(string))
	if _, err := a.Pool.Exec(t.Context(), `INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, 'requests', $2, $3, 42)`, id, start, end); err != nil {
		t.Fatal(err)
	}
	d = a.admin(t, "GET", "/admin/v1/tenants/"+id, nil, http.StatusOK)
	if d.JSON["status"] != "active" || d.JSON["effective_plan"] != plan || d.JSON["entitlement_version"] != float64(1) ||
		d.JSON["subscription"] != nil {
		t.Fatalf("detail: %s", d.Raw)
	}
	usage := d.JSON["usage"].([]any)
	if len(usage) != 1 || usage[0].(map[string]any)["used"] != float64(42) || usage[0].(map[string]any)["limit"] != float64(1000) {
		t.Fatalf("usage: %s", d.Raw)
	}
	// The live Redis counter wins over the durable figure when present.
	if err := a.RDB.HSet(t.Context(), a.Store.Keys().State(id), keyspace.CounterOf("requests", start).Used(), 57).Err(); err != nil {
		t.Fatal(err)
	}
	d = a.admin(t, "GET", "/admin/v1/tenants/"+id, nil, http.StatusOK)
	if u := d.JSON["usage"].([]any)[0].(map[string]any); u["used"] != float64(57) || u["source"] != "redis" {
		t.Fatalf("live usage: %s", d.Raw)
	}

	// Pagination and search.
	tag := uniqueName("Zeta")
	var want []string
	for i := 0; i < 3; i++ {
		r := a.admin(t, "POST", "/admin/v1/tenants", map[string]any{"name": tag + " Corp", "plan": plan}, http.StatusCreated)
		want = append([]string{r.JSON["id"].(string)}, want...) // newest first
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("pagination does not end")
		}
		q := url.Values{"q": {"zeta" + tag[4:]}, "limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Tenants []struct {
				ID string `json:"id"`
			} `json:"tenants"`
			NextCursor *string `json:"next_cursor"`
		}
		r := a.admin(t, "GET", "/admin/v1/tenants?"+q.Encode(), nil, http.StatusOK)
		if _, ok := r.JSON["next_cursor"]; !ok {
			t.Fatalf("next_cursor missing: %s", r.Raw)
		}
		r.Decode(t, &page)
		for _, tn := range page.Tenants {
			got = append(got, tn.ID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged %v, want %v", got, want)
	}
}

func TestTenantErrors(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	plan := a.createPlan(t, map[string]any{})
	cus := uniqueName("cus")
	a.admin(t, "POST", "/admin/v1/tenants", map[string]any{"name": "A", "plan": plan, "stripe_customer_id": cus}, http.StatusCreated)
	tenant := a.createTenant(t, plan)
	cases := []struct {
		name   string
		method string
		path   string
		body   any
		status int
		fields []string
	}{
		{"unknown plan", "POST", "/admin/v1/tenants", map[string]any{"name": "B", "plan": "no-such-plan"}, 400, []string{"plan"}},
		{"missing name", "POST", "/admin/v1/tenants", map[string]any{"plan": plan}, 400, []string{"name"}},
		{"duplicate customer", "POST", "/admin/v1/tenants", map[string]any{"name": "B", "plan": plan, "stripe_customer_id": cus}, 409, []string{"stripe_customer_id"}},
		{"malformed JSON", "POST", "/admin/v1/tenants", `{"name": }`, 400, nil},
		{"name not a string", "POST", "/admin/v1/tenants", map[string]any{"name": 5}, 400, []string{"name"}},
		{"unknown tenant", "GET", "/admin/v1/tenants/00000000-0000-0000-0000-000000000000", nil, 404, nil},
		{"bad uuid", "GET", "/admin/v1/tenants/not-a-uuid", nil, 404, nil},
		{"bad limit", "GET", "/admin/v1/tenants?limit=abc", nil, 400, []string{"limit"}},
		{"limit too big", "GET", "/admin/v1/tenants?limit=201", nil, 400, []string{"limit"}},
		{"limit zero", "GET", "/admin/v1/tenants?limit=0", nil, 400, []string{"limit"}},
		{"bad cursor", "GET", "/admin/v1/tenants?cursor=!!!", nil, 400, nil},
		{"forged cursor", "GET", "/admin/v1/tenants?cursor=Zm9vL2Jhcg", nil, 400, []string{"cursor"}},
		{"change plan of unknown tenant", "PUT", "/admin/v1/tenants/00000000-0000-0000-0000-000000000000/plan", map[string]any{"plan": plan}, 404, nil},
		{"change plan, bad uuid", "PUT", "/admin/v1/tenants/xyz/plan", map[string]any{"plan": plan}, 404, nil},
		{"change to unknown plan", "PUT", "/admin/v1/tenants/" + tenant + "/plan", map[string]any{"plan": "no-such-plan"}, 400, []string{"plan"}},
		{"change plan without plan", "PUT", "/admin/v1/tenants/" + tenant + "/plan", map[string]any{}, 400, []string{"plan"}},
		{"keys of unknown tenant", "GET", "/admin/v1/tenants/00000000-0000-0000-0000-000000000000/api-keys", nil, 404, nil},
		{"key for unknown tenant", "POST", "/admin/v1/tenants/00000000-0000-0000-0000-000000000000/api-keys", nil, 404, nil},
		{"revoke unknown key", "DELETE", "/admin/v1/api-keys/00000000-0000-0000-0000-000000000000", nil, 404, nil},
		{"revoke bad key id", "DELETE", "/admin/v1/api-keys/42", nil, 404, nil},
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
}
