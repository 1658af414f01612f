package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestServiceRoutes: the remote loaders' routes answer a service token and
// ADMIN_TOKEN, nothing else; a service token opens nothing else; the
// snapshot is the limiter's JSON (and is written back to Redis); usage is
// the durable figure; bad input is 4xx naming the field.
func TestServiceRoutes(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix()
	a := newTestAPI(t, testAPIOptions{Prefix: prefix, Deps: func(d *Deps) {
		d.Metering = metering.NewService(d.DB, limitstore.New(d.Redis, prefix), nil, metering.Options{})
	}})
	t.Cleanup(func() { redistest.Clean(context.Background(), a.RDB, prefix) })
	plan := a.createPlan(t, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}}})
	tenant := a.createTenant(t, plan)
	tenantKey, _ := a.issueKey(t, tenant)

	r := a.admin(t, http.MethodPost, "/admin/v1/service-tokens", map[string]any{"name": "backend"}, http.StatusCreated)
	token, _ := r.JSON["token"].(string)
	id, _ := r.JSON["id"].(string)
	if !strings.HasPrefix(token, "tgs_") || id == "" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("issued %s %v", r.Raw, r.Header)
	}
	assertProblem(t, "nameless token", a.admin(t, http.MethodPost, "/admin/v1/service-tokens", map[string]any{}, 0), http.StatusBadRequest)
	if l := a.admin(t, http.MethodGet, "/admin/v1/service-tokens", nil, http.StatusOK); !strings.Contains(string(l.Raw), id) || strings.Contains(string(l.Raw), token) {
		t.Fatalf("list: %s", l.Raw)
	}

	snapPath := "/service/v1/tenants/" + tenant + "/snapshot"
	a.RDB.Del(context.Background(), a.Store.Keys().Snapshot(tenant))
	for _, tok := range []string{token, testAdminToken} {
		r := a.do(t, http.MethodGet, snapPath, tok, nil)
		var snap limiter.Snapshot
		if r.Status != http.StatusOK {
			t.Fatalf("snapshot with %.6s…: %d %s", tok, r.Status, r.Raw)
		}
		r.Decode(t, &snap)
		if snap.TenantID != tenant || snap.Plan != plan || snap.Quotas["requests"].Limit != 30 || snap.Quotas["requests"].Mode != limiter.ModeHard || snap.PeriodEnd.IsZero() {
			t.Fatalf("snapshot %+v", snap)
		}
	}
	if _, ok, err := a.Store.Snapshot(context.Background(), tenant); err != nil || !ok {
		t.Fatalf("the loaded snapshot was not written back to Redis: %v %v", ok, err)
	}
	// Other credentials: 401 with WWW-Authenticate.
	for name, tok := range map[string]string{"none": "", "tenant key": tenantKey, "made up": "tgs_" + strings.Repeat("x", 43)} {
		r := a.do(t, http.MethodGet, snapPath, tok, nil)
		assertProblem(t, name, r, http.StatusUnauthorized)
		if r.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s: no WWW-Authenticate", name)
		}
	}
	// A service token opens neither the admin API nor the tenant API.
	assertProblem(t, "service token on admin", a.do(t, http.MethodGet, "/admin/v1/plans", token, nil), http.StatusUnauthorized)
	assertProblem(t, "service token on /v1", a.do(t, http.MethodGet, "/v1/entitlements", token, nil), http.StatusUnauthorized)
	// Unknown tenants: 404, also for ids that are not UUIDs.
	assertProblem(t, "unknown tenant", a.do(t, http.MethodGet, "/service/v1/tenants/00000000-0000-4000-8000-000000000000/snapshot", token, nil), http.StatusNotFound)
	assertProblem(t, "not a uuid", a.do(t, http.MethodGet, "/service/v1/tenants/acme/snapshot", token, nil), http.StatusNotFound)
	assertProblem(t, "wrong method", a.do(t, http.MethodPost, snapPath, token, nil), http.StatusMethodNotAllowed)

	// Usage: the durable figure of the period.
	var snap limiter.Snapshot
	a.do(t, http.MethodGet, snapPath, token, nil).Decode(t, &snap)
	if _, err := a.Srv.Metering.Ingest(context.Background(), tenant, []metering.Event{{ID: "e1", Meter: "requests", Quantity: 7, Timestamp: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	usagePath := "/service/v1/tenants/" + tenant + "/usage?meter=requests&period_start=" + snap.PeriodStart.UTC().Format(time.RFC3339)
	u := a.do(t, http.MethodGet, usagePath, token, nil)
	if u.Status != http.StatusOK || u.JSON["used"] != float64(7) || u.JSON["meter"] != "requests" {
		t.Fatalf("usage: %d %s", u.Status, u.Raw)
	}
	for field, q := range map[string]string{
		"period_start": "?meter=requests",
		"meter":        "?meter=Bad%20Meter&period_start=" + snap.PeriodStart.UTC().Format(time.RFC3339),
	} {
		r := a.do(t, http.MethodGet, "/service/v1/tenants/"+tenant+"/usage"+q, token, nil)
		assertProblem(t, field, r, http.StatusBadRequest)
		if fe := r.FieldErrors(); len(fe) != 1 || fe[0] != field {
			t.Fatalf("%s: errors %v", field, fe)
		}
	}
	assertProblem(t, "bad time", a.do(t, http.MethodGet, "/service/v1/tenants/"+tenant+"/usage?period_start=yesterday", token, nil), http.StatusBadRequest)

	// Revoked: refused at once.
	a.admin(t, http.MethodDelete, "/admin/v1/service-tokens/"+id, nil, http.StatusNoContent)
	assertProblem(t, "revoked token", a.do(t, http.MethodGet, snapPath, token, nil), http.StatusUnauthorized)
	assertProblem(t, "revoke unknown", a.admin(t, http.MethodDelete, "/admin/v1/service-tokens/nope", nil, 0), http.StatusNotFound)
}

// TestServiceGrantsRoute: the remote loaders' grants route answers a
// service token and ADMIN_TOKEN with the grants the limiter draws (in
// effect or pending, units left), in draw order, without voided ones; a
// tenant API key is refused; an unknown tenant is 404; without credits the
// route is 503, never an empty list that would read as "no grants".
func TestServiceGrantsRoute(t *testing.T) {
	t.Parallel()
	a := grantsAPI(t)
	plan := a.createPlan(t, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}}})
	tenant := a.createTenant(t, plan)
	tenantKey, _ := a.issueKey(t, tenant)
	token, _ := a.admin(t, http.MethodPost, "/admin/v1/service-tokens", map[string]any{"name": "backend"}, http.StatusCreated).JSON["token"].(string)
	ctx := t.Context()
	in24, later := time.Now().Add(24*time.Hour), time.Now().Add(time.Hour)
	n := func(v int64) *int64 { return &v }
	p10, p60 := 10, 60
	second, err := a.Srv.Credits.Create(ctx, tenant, credits.GrantInput{Meter: "requests", Amount: n(50), Priority: &p60})
	if err != nil {
		t.Fatal(err)
	}
	first, err := a.Srv.Credits.Create(ctx, tenant, credits.GrantInput{Meter: "requests", Amount: n(20), Priority: &p10, ExpiresAt: &in24})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := a.Srv.Credits.Create(ctx, tenant, credits.GrantInput{Meter: "requests", Amount: n(5), EffectiveAt: &later})
	if err != nil {
		t.Fatal(err)
	}
	voided, err := a.Srv.Credits.Create(ctx, tenant, credits.GrantInput{Meter: "requests", Amount: n(9)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Srv.Credits.Void(ctx, voided.ID); err != nil {
		t.Fatal(err)
	}
	path := "/service/v1/tenants/" + tenant + "/grants"
	for _, tok := range []string{token, testAdminToken} {
		r := a.do(t, http.MethodGet, path, tok, nil)
		if r.Status != http.StatusOK || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("grants with %.6s…: %d %s", tok, r.Status, r.Raw)
		}
		var body ServiceGrants
		r.Decode(t, &body)
		var got []string
		for _, g := range body.Grants {
			got = append(got, g.ID)
		}
		want := []string{first.ID, pending.ID, second.ID} // priority 10, 50, 60
		if body.TenantID != tenant || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("grants %s, want %v", r.Raw, want)
		}
		if g := body.Grants[0]; g.Remaining != 20 || g.ExpiresAt == nil || !g.ExpiresAt.Equal(first.ExpiresAt.UTC()) || body.Grants[2].ExpiresAt != nil {
			t.Fatalf("grant fields %s", r.Raw)
		}
	}
	assertProblem(t, "tenant key", a.do(t, http.MethodGet, path, tenantKey, nil), http.StatusUnauthorized)
	assertProblem(t, "unknown tenant", a.do(t, http.MethodGet, "/service/v1/tenants/00000000-0000-4000-8000-000000000000/grants", token, nil), http.StatusNotFound)

	plain := newTestAPI(t, testAPIOptions{})
	other := plain.createTenant(t, plain.createPlan(t, map[string]any{}))
	assertProblem(t, "no credits", plain.do(t, http.MethodGet, "/service/v1/tenants/"+other+"/grants", testAdminToken, nil), http.StatusServiceUnavailable)
}
