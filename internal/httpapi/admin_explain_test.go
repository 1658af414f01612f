package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
)

// explainBody is GET /admin/v1/tenants/{id}/explain as a client reads it.
type explainBody struct {
	TenantID string `json:"tenant_id"`
	Plan     string `json:"plan"`
	Status   string `json:"status"`
	Version  int64  `json:"version"`
	Limits   []struct {
		Policy    string `json:"policy"`
		Unlimited bool   `json:"unlimited"`
		Limit     *int64 `json:"limit"`
		Mode      string `json:"mode"`
		Rate      *struct {
			PerSecond float64 `json:"per_second"`
			Burst     int64   `json:"burst"`
		} `json:"rate"`
		Sources []struct {
			Kind          string     `json:"kind"`
			Detail        string     `json:"detail"`
			Result        *int64     `json:"result"`
			PlanKey       string     `json:"plan"`
			PlanVersion   int64      `json:"plan_version"`
			OverrideID    string     `json:"override_id"`
			Reason        string     `json:"reason"`
			ExpiresAt     *time.Time `json:"expires_at"`
			CreatedBy     string     `json:"created_by"`
			StripeEventID string     `json:"stripe_event_id"`
		} `json:"sources"`
	} `json:"limits"`
}

func TestExplainTenantAPI(t *testing.T) {
	t.Parallel()
	const billingToken = "tga_billing_team_token_0123456789"
	a := newTestAPI(t, testAPIOptions{Deps: func(d *Deps) {
		d.AdminTokens = map[string]string{"billing-bob": billingToken}
		d.Audit = audit.New(d.DB, d.Log)
		readers.Register(d.Audit, d.Entitlements, d.Catalogue, d.Credentials, nil, nil)
	}})
	plan := a.createPlan(t, map[string]any{"rate": map[string]any{"per_second": 5, "burst": 10}, "concurrency": 2,
		"quotas": map[string]any{"requests": map[string]any{"limit": 1000}}})
	a.admin(t, http.MethodPatch, "/admin/v1/plans/"+plan, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 2000}}}, http.StatusOK)
	id := a.admin(t, http.MethodPost, "/admin/v1/tenants", map[string]any{"name": "Acme", "plan": plan}, http.StatusCreated).JSON["id"].(string)
	until := time.Now().Add(72 * time.Hour).UTC().Truncate(time.Second)
	r := a.do(t, http.MethodPost, "/admin/v1/tenants/"+id+"/overrides", billingToken,
		map[string]any{"meter": "requests", "extra": 500, "reason": "launch week", "expires_at": until})
	if r.Status != http.StatusCreated {
		t.Fatalf("override: %d %s", r.Status, r.Raw)
	}
	oid := r.JSON["id"].(string)

	var e explainBody
	a.admin(t, http.MethodGet, "/admin/v1/tenants/"+id+"/explain", nil, http.StatusOK).Decode(t, &e)
	var got []string
	for _, l := range e.Limits {
		got = append(got, l.Policy)
	}
	if e.TenantID != id || e.Plan != plan || e.Status != "active" || e.Version != 2 || !slices.Equal(got, []string{"rate", "concurrency", "quota:requests"}) {
		t.Fatalf("explanation: %+v", e)
	}
	// The same figures as the tenant detail, which is the enforced snapshot.
	d := a.admin(t, http.MethodGet, "/admin/v1/tenants/"+id, nil, http.StatusOK).JSON["entitlements"].(map[string]any)
	req := e.Limits[2]
	if want := d["quotas"].(map[string]any)["requests"].(map[string]any)["limit"]; float64(*req.Limit) != want || *req.Limit != 2500 {
		t.Fatalf("requests explained %d, enforced %v", *req.Limit, want)
	}
	if rate := e.Limits[0].Rate; rate == nil || rate.Burst != 10 || *e.Limits[1].Limit != 2 {
		t.Fatalf("rate/concurrency: %+v %+v", e.Limits[0], e.Limits[1])
	}
	if p := req.Sources[0]; p.Kind != "plan" || p.PlanKey != plan || p.PlanVersion != 2 || *p.Result != 2000 {
		t.Fatalf("plan source: %+v", p)
	}
	o := req.Sources[1]
	if o.Kind != "override" || o.OverrideID != oid || o.Reason != "launch week" || o.ExpiresAt == nil || !o.ExpiresAt.Equal(until) ||
		o.CreatedBy != "billing-bob" || *o.Result != 2500 || !strings.Contains(o.Detail, "+500 extra") {
		t.Fatalf("override source: %+v", o)
	}

	// A malformed id is no tenant: 404 as GET /admin/v1/tenants/{id}
	// answers it; unknown: 404; no token: 401.
	for _, bad := range []string{"not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		nf := a.admin(t, http.MethodGet, "/admin/v1/tenants/"+bad+"/explain", nil, http.StatusNotFound)
		if !strings.HasPrefix(nf.Header.Get("Content-Type"), "application/problem+json") {
			t.Fatalf("tenant %s: %s", bad, nf.Raw)
		}
		a.admin(t, http.MethodGet, "/admin/v1/tenants/"+bad, nil, http.StatusNotFound)
	}
	if r := a.do(t, http.MethodGet, "/admin/v1/tenants/"+id+"/explain", "", nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("without a token: %d", r.Status)
	}
}
