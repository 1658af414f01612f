// Package browser_test drives the dashboard and the console in a real
// Chromium (chromedp) against the real API server, Postgres and Redis. It
// is a test binary of its own, so that web's unit tests start no browser
// and go test runs the two packages side by side. The pages are built
// through web's exported API, as cmd/api builds them, on webtest's
// services.
package browser_test

import (
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/web"
	"github.com/tollgatehq/tollgate/web/webtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is one test's world: webtest's services, and the pages registered
// on the API server it serves.
type bundle struct {
	*webtest.World
	web *web.Web
	srv *httptest.Server
}

var (
	uniq    = webtest.Uniq
	apiJSON = webtest.APIJSON
)

func ptr[T any](v T) *T { return &v }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, webtest.Options{})
}

func setupWith(t testing.TB, o webtest.Options) *bundle {
	t.Helper()
	w := webtest.New(t, o)
	var upgrades web.Upgrader // as cmd/api: self-serve plan changes need Stripe
	var topups web.TopupBuyer // and so does buying credits
	if w.Stripe {
		upgrades, topups = w.Billing, w.Billing
	}
	pages, err := web.New(web.Deps{Log: slog.New(slog.DiscardHandler), DB: w.Pool, Limits: w.Store, Snapshots: w.Ents,
		Usage: w.Meter, AdminToken: w.Admin, AdminTokens: w.AdminTokens, DefaultPlan: w.Free, Audit: w.Trail,
		Entitlements: w.Ents, Catalogue: w.Cat, Credentials: w.Keys, Billing: w.Billing, Metering: w.Meter, Upgrades: upgrades, Topups: topups,
		Attempts: w.Limiter, Guard: w.Guard, Plans: w.Plans, PlanAdmin: w.Cat, Addons: w.Cat, Keys: w.Keys,
		Overrides: w.Ents, Explainer: w.Ents, Tenants: w.Ents, Previews: w.Ents, Grants: w.Creds,
		Replayer: w.Billing, Resyncer: w.Billing})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{World: w, web: pages}
	b.srv, _ = w.Serve(t, pages)
	return b
}

// mint makes a single-use dashboard login link for the tenant.
func (b *bundle) mint(t testing.TB, tenantID string) string {
	t.Helper()
	return b.Mint(t, b.web, tenantID)
}

// event stores a failed Stripe event as the webhook intake would, received
// minutesAgo minutes ago (billing has no function that stores one in a
// given state).
func (b *bundle) event(t testing.TB, id, customer, tenantID, status string, minutesAgo int) {
	t.Helper()
	var lastErr any
	if status == "failed" {
		lastErr = "boom"
	}
	if _, err := b.Pool.Exec(b.Ctx, `
		INSERT INTO stripe_events (id, type, stripe_customer_id, tenant_id, event_created, received_at, payload, status, attempts, last_error)
		VALUES ($1, 'customer.subscription.updated', $2, $3, now(), now() - make_interval(mins => $4), '{}', $5, 1, $6)`,
		id, customer, tenantID, minutesAgo, status, lastErr); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) eventStatus(t testing.TB, id string) string {
	t.Helper()
	ev, err := b.Billing.GetEvent(b.Ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Status
}
