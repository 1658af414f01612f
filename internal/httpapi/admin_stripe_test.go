package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

// The admin's Stripe routes: auth, and 503 where billing is not wired. What
// they return is tested end to end in internal/billing.
func TestAdminStripeRoutesNeedTheTokenAndBilling(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	routes := []struct{ method, path string }{
		{http.MethodGet, "/admin/v1/stripe/events"},
		{http.MethodGet, "/admin/v1/stripe/events/evt_1"},
		{http.MethodPost, "/admin/v1/stripe/events/evt_1/replay"},
		{http.MethodGet, "/admin/v1/stripe/drift"},
		{http.MethodPost, "/admin/v1/tenants/00000000-0000-0000-0000-000000000000/resync"},
	}
	ents := entitlements.NewService(pool, nil, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	srv, err := NewServer(Deps{DB: pool, AdminToken: whAdminToken, Entitlements: ents, Catalogue: cat, Credentials: credentials.New(pool, ents, nil, credentials.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	bare := httptest.NewServer(srv)
	defer bare.Close()
	wired := whServer(t, pool, billing.Options{WebhookSecret: whSecret})
	for _, r := range routes {
		call := func(base, token string) int {
			req, _ := http.NewRequest(r.method, base+r.path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := call(wired.URL, ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without token: %d, want 401", r.method, r.path, got)
		}
		if got := call(bare.URL, whAdminToken); got != http.StatusServiceUnavailable {
			t.Errorf("%s %s without billing: %d, want 503", r.method, r.path, got)
		}
		want := http.StatusNotFound
		switch {
		case strings.HasSuffix(r.path, "/events") || strings.HasSuffix(r.path, "/drift"):
			want = http.StatusOK
		case strings.HasSuffix(r.path, "/resync"):
			want = http.StatusServiceUnavailable // no STRIPE_SECRET_KEY
		}
		if got := call(wired.URL, whAdminToken); got != want {
			t.Errorf("%s %s: %d, want %d", r.method, r.path, got, want)
		}
	}
}
