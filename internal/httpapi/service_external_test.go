package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/remote"
)

// The service routes take "ext:<external id>" wherever they take a tenant
// id: the same snapshot and usage, the alias written back to Redis, an
// unknown or removed one the 404 of an unknown tenant id.
func TestServiceRoutesByExternalID(t *testing.T) {
	prefix := redistest.Prefix()
	a := newTestAPI(t, testAPIOptions{Prefix: prefix, Deps: func(d *Deps) {
		d.Metering = metering.NewService(d.DB, limitstore.New(d.Redis, prefix), nil, metering.Options{})
	}})
	t.Cleanup(func() { redistest.Clean(context.Background(), a.RDB, prefix) })
	plan := a.createPlan(t, map[string]any{"quotas": map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}}})
	// An external id that is itself a UUID: the prefix tells it apart.
	ext := "0b8c2a52-3f0e-4a52-9d1e-" + uniqueName("")[1:9] + "abcd"
	r := a.admin(t, http.MethodPost, "/admin/v1/tenants", map[string]any{"name": "Acme", "plan": plan, "external_id": ext}, http.StatusCreated)
	tenant, _ := r.JSON["id"].(string)
	r = a.admin(t, http.MethodPost, "/admin/v1/service-tokens", map[string]any{"name": "backend"}, http.StatusCreated)
	token, _ := r.JSON["token"].(string)

	a.RDB.Del(context.Background(), a.Store.Keys().Alias(ext))
	s := a.do(t, http.MethodGet, "/service/v1/tenants/ext:"+ext+"/snapshot", token, nil)
	var snap limiter.Snapshot
	if s.Status != http.StatusOK {
		t.Fatalf("snapshot by external id: %d %s", s.Status, s.Raw)
	}
	s.Decode(t, &snap)
	if snap.TenantID != tenant || snap.Plan != plan {
		t.Fatalf("snapshot %+v", snap)
	}
	if got, ok, err := a.Store.Alias(context.Background(), ext); err != nil || !ok || got != tenant {
		t.Fatalf("alias not written back: %q %v %v", got, ok, err)
	}
	// The bare UUID-looking external id is a tenant id, and no tenant has it.
	assertProblem(t, "external id without prefix", a.do(t, http.MethodGet, "/service/v1/tenants/"+ext+"/snapshot", token, nil), http.StatusNotFound)

	if _, err := a.Srv.Metering.Ingest(context.Background(), tenant, []metering.Event{{ID: "e1", Meter: "requests", Quantity: 5, Timestamp: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	u := a.do(t, http.MethodGet, "/service/v1/tenants/ext:"+ext+"/usage?meter=requests&period_start="+url.QueryEscape(snap.PeriodStart.UTC().Format(time.RFC3339)), token, nil)
	if u.Status != http.StatusOK || u.JSON["used"] != float64(5) || u.JSON["tenant_id"] != tenant {
		t.Fatalf("usage by external id: %d %s", u.Status, u.Raw)
	}

	// Unknown, malformed and removed: the 404 of an unknown tenant id.
	for _, p := range []string{"ext:" + uniqueName("nobody"), "ext:", "ext:a%20b", "ext:%7Bx%7D"} {
		r := a.do(t, http.MethodGet, "/service/v1/tenants/"+p+"/snapshot", token, nil)
		assertProblem(t, p, r, http.StatusNotFound)
		r = a.do(t, http.MethodGet, "/service/v1/tenants/"+p+"/usage?period_start="+url.QueryEscape(snap.PeriodStart.UTC().Format(time.RFC3339)), token, nil)
		assertProblem(t, p+" usage", r, http.StatusNotFound)
	}
	a.admin(t, http.MethodPatch, "/admin/v1/tenants/"+tenant, `{"external_id": null}`, http.StatusOK)
	assertProblem(t, "removed", a.do(t, http.MethodGet, "/service/v1/tenants/ext:"+ext+"/snapshot", token, nil), http.StatusNotFound)
	// The limiter's remote loader resolves an external id through these routes.
	rc, err := remote.New(a.URL, token, remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	again := uniqueName("again")
	a.admin(t, http.MethodPatch, "/admin/v1/tenants/"+tenant, map[string]any{"external_id": again}, http.StatusOK)
	if id, err := rc.ExternalTenant(context.Background(), again); err != nil || id != tenant {
		t.Fatalf("remote ExternalTenant = %q, %v", id, err)
	}
	for _, unknown := range []string{ext, "a/b", ""} {
		if _, err := rc.ExternalTenant(context.Background(), unknown); !errors.Is(err, limiter.ErrUnknownTenant) {
			t.Fatalf("remote ExternalTenant(%q) = %v, want ErrUnknownTenant", unknown, err)
		}
	}
	// Still the service routes' credentials.
	assertProblem(t, "no token", a.do(t, http.MethodGet, "/service/v1/tenants/ext:"+ext+"/snapshot", "", nil), http.StatusUnauthorized)
}
