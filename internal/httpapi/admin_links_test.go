package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/web"
)

func TestMintDashboardLink(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(pool, store, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	keys := credentials.New(pool, ents, nil, credentials.Options{})
	meter := metering.NewService(pool, store, nil, metering.Options{Snapshot: ents.ReloadSnapshot})
	const token = "tga_links_test"
	ins, err := jobs.NewInsertClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	bill, err := billing.New(pool, ents, cat, ins, nil, billing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := web.New(web.Deps{DB: pool, Limits: store, Snapshots: ents, Usage: meter, AdminToken: token,
		Entitlements: ents, Catalogue: cat, Credentials: keys, Billing: bill, Metering: meter})
	if err != nil {
		t.Fatal(err)
	}
	var tenantID string
	if err := pool.QueryRow(t.Context(), `
		WITH p AS (INSERT INTO plans (key, name) VALUES ('links-plan', 'Links') ON CONFLICT (key) DO UPDATE SET name = 'Links' RETURNING key)
		INSERT INTO tenants (name, plan_key) SELECT 'Links Tenant', key FROM p RETURNING id`).Scan(&tenantID); err != nil {
		t.Fatal(err)
	}

	newServer := func(links DashboardLinks) *httptest.Server {
		s, err := NewServer(Deps{DB: pool, Redis: rdb, AdminToken: token, Entitlements: ents, Catalogue: cat, Credentials: keys, Metering: meter, DashboardLinks: links})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv
	}
	post := func(srv *httptest.Server, id, auth string) (*http.Response, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/admin/v1/tenants/"+id+"/dashboard-links", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		return r, body
	}

	srv := newServer(w)
	r, body := post(srv, tenantID, token)
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("mint: %d %v", r.StatusCode, body)
	}
	u, _ := body["url"].(string)
	if !strings.HasPrefix(u, "/dashboard/login?token=") || len(u) < len("/dashboard/login?token=")+40 {
		t.Fatalf("url %q", u)
	}
	exp, err := time.Parse(time.RFC3339Nano, body["expires_at"].(string))
	if err != nil || time.Until(exp) < 14*time.Minute || time.Until(exp) > 16*time.Minute {
		t.Fatalf("expires_at %v (%v): want 15 minutes ahead", body["expires_at"], err)
	}
	if _, b2 := post(srv, tenantID, token); b2["url"] == u {
		t.Fatal("two links share a token")
	}

	for _, tc := range []struct {
		name, id, auth string
		want           int
	}{
		{"no token", tenantID, "", http.StatusUnauthorized},
		{"wrong token", tenantID, "nope", http.StatusUnauthorized},
		{"unknown tenant", "00000000-0000-0000-0000-000000000000", token, http.StatusNotFound},
		{"malformed id", "not-a-uuid", token, http.StatusNotFound},
	} {
		if r, body := post(srv, tc.id, tc.auth); r.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d (%v)", tc.name, r.StatusCode, tc.want, body)
		}
	}

	// A server without the web answers 503, never 500.
	if r, body := post(newServer(nil), tenantID, token); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("without links: %d %v", r.StatusCode, body)
	}
}
