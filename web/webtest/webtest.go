// Package webtest builds, for the tests of the dashboard and the console,
// the world cmd/api wires around them: the real services on the test
// package's database and the test's own Redis prefix, the limiter, and the
// API server the pages are registered on. It does not import web, so that
// web's own tests use it as well as the browser tests in web/browser,
// which build the pages through web's exported API. Fixtures that write
// other packages' tables directly stay in those tests' files.
package webtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// World is one test's services, wired as cmd/api wires them.
type World struct {
	Ctx     context.Context
	Pool    *pgxpool.Pool
	Redis   *redis.Client
	Prefix  string
	Store   *limitstore.Store
	Ents    *entitlements.Service
	Cat     *catalogue.Service
	Keys    *credentials.Service
	Meter   *metering.Service
	Creds   *credits.Service
	Billing *billing.Service
	Trail   *audit.Log
	Limiter *limiter.Limiter
	Guard   *httpapi.AuthLimiter
	// Plans changes a tenant's plan: billing with Stripe, entitlements
	// without (as cmd/api's planChanger).
	Plans entitlements.PlanChanger
	// Stripe says billing talks to stripe-mock (Options.StripeBase): the
	// pages' self-serve plan changes and top-ups go through Billing then.
	Stripe      bool
	Admin       string            // admin token (ADMIN_TOKEN: actor "admin")
	Alice       string            // a named admin credential (ADMIN_TOKENS: actor "alice")
	AdminTokens map[string]string // ADMIN_TOKENS
	Free        string            // this test's default plan
	Pro         string            // a bigger plan
	// Fallbacks counts the limiter's fail-mode decisions (Redis slower
	// than the timeout): a quota decided so is allowed but not counted.
	Fallbacks atomic.Int64
	// CachedRefusals counts refusals the limiter answered from its local
	// refusal cache (no Redis round trip).
	CachedRefusals atomic.Int64
}

// Options change the world of one test.
type Options struct {
	// StripeBase, when set, configures billing against stripe-mock there and
	// makes billing the plan changer (as cmd/api does with
	// STRIPE_SECRET_KEY).
	StripeBase string
}

// Uniq is name with a random suffix: tests share their package's database.
func Uniq(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }

// New builds the services on the test package's database (pgtest.Main in
// its TestMain) and a Redis prefix of the test's own, with two plans: Free
// (the default) and Pro.
func New(t testing.TB, o Options) *World {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	log := slog.New(slog.DiscardHandler)
	w := &World{Ctx: ctx, Pool: pool, Redis: rdb, Prefix: prefix, Store: limitstore.New(rdb, prefix),
		Admin: "tga_" + Uniq("admin"), Alice: "tga_" + Uniq("alice-token"), Free: Uniq("free"), Pro: Uniq("pro")}
	w.AdminTokens = map[string]string{"alice": w.Alice}
	w.Ents = entitlements.NewService(pool, w.Store, log, entitlements.Options{DefaultPlan: w.Free})
	w.Cat = catalogue.NewService(pool, log, catalogue.Options{Touch: w.Ents.TouchCatalogue})
	w.Keys = credentials.New(pool, w.Ents, log, credentials.Options{Redis: rdb, Prefix: prefix})
	// Keys.Run is not started: without it Authenticate asks Postgres every
	// time, which is what these tests want to see.
	w.Meter = metering.NewService(pool, w.Store, log, metering.Options{Snapshot: w.Ents.ReloadSnapshot})
	// Grants go to Redis, where the limiter draws them, as in cmd/api.
	w.Creds = credits.NewService(pool, w.Ents, w.Cat, log, credits.Options{Grants: w.Store})
	// The limiter gives Redis 50 ms by default, then decides by the fail
	// modes for a cooldown: a quota fails open, allowing a request without
	// counting it (limiter.md). On a loaded CI machine (-race, Chromium,
	// other packages on the same Redis) one reply can take longer, and
	// checks the tests count on went uncounted. These tests are about the
	// pages, not the fail modes (internal/httpapi tests those), so the
	// timeout is generous and a fallback is recorded for the tests to
	// assert on.
	lim, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Loader: w.Ents.ReloadSnapshot, UsageLoader: w.Meter.LoadUsage,
		GrantLoader: w.Creds.RedisGrants,
		Timeout:     10 * time.Second,
		Hooks: limiter.Hooks{OnFallback: func(string, limiter.FailMode) { w.Fallbacks.Add(1) },
			OnRefusalCacheHit: func(string) { w.CachedRefusals.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	w.Limiter = lim
	w.Guard = httpapi.NewAuthLimiter(lim, httpapi.AuthLimitOptions{Limit: 5, Window: time.Minute})
	ins, err := jobs.NewInsertClient(pool, log)
	if err != nil {
		t.Fatal(err)
	}
	bo := billing.Options{Credits: w.Creds}
	if o.StripeBase != "" {
		bo.SecretKey, bo.APIBase, bo.StripeTimeout = "sk_test_123", o.StripeBase, 5*time.Second
	}
	if w.Billing, err = billing.New(pool, w.Ents, w.Cat, ins, log, bo); err != nil {
		t.Fatal(err)
	}
	w.Plans, w.Stripe = w.Ents, o.StripeBase != ""
	if w.Stripe {
		w.Plans = w.Billing
	}
	w.Trail = audit.New(pool, log)
	readers.Register(w.Trail, w.Ents, w.Cat, w.Keys, w.Billing, w.Creds)

	w.Plan(t, catalogue.PlanInput{Key: w.Free, Name: "Free",
		Rate:   &catalogue.RateInput{PerSecond: ptr(100.0), Burst: ptr[int64](100)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}}})
	w.Plan(t, catalogue.PlanInput{Key: w.Pro, Name: "Pro",
		Quotas:   map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100000)}, "exports": {Limit: ptr[int64](50), Mode: "soft"}},
		Features: []string{"exports"}})
	return w
}

// Pages is what the API server serves besides the API: the dashboard and
// the console (*web.Web).
type Pages interface {
	httpapi.DashboardLinks
	Register(e *echo.Echo)
}

// Serve builds the API server with pages registered on it, as cmd/api
// does, and serves it until the test ends.
func (w *World) Serve(t testing.TB, pages Pages) (*httptest.Server, *httpapi.Server) {
	t.Helper()
	api, err := httpapi.NewServer(httpapi.Deps{Log: slog.New(slog.DiscardHandler), DB: w.Pool, Redis: w.Redis, AdminToken: w.Admin,
		AdminTokens: w.AdminTokens, Audit: w.Trail, Entitlements: w.Ents, Catalogue: w.Cat, Credentials: w.Keys, Metering: w.Meter, PlanChanger: w.Plans,
		Limiter: w.Limiter, AuthLimiter: w.Guard, DashboardLinks: pages, Credits: w.Creds})
	if err != nil {
		t.Fatal(err)
	}
	pages.Register(api.Echo())
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv, api
}

// Plan creates a plan.
func (w *World) Plan(t testing.TB, in catalogue.PlanInput) {
	t.Helper()
	if _, err := w.Cat.CreatePlan(w.Ctx, in); err != nil {
		t.Fatalf("create plan: %v", err)
	}
}

// Tenant creates a tenant on plan.
func (w *World) Tenant(t testing.TB, name, plan string) entitlements.Tenant {
	t.Helper()
	tn, err := w.Ents.CreateTenant(w.Ctx, entitlements.TenantInput{Name: name, Plan: plan})
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	return tn
}

// Key issues an API key to the tenant.
func (w *World) Key(t testing.TB, tenantID string) credentials.IssuedKey {
	t.Helper()
	k, err := w.Keys.IssueKey(w.Ctx, tenantID, "test")
	if err != nil {
		t.Fatalf("issue key: %v", err)
	}
	return k
}

// Mint makes a single-use dashboard login link for the tenant with the
// pages' links (*web.Web).
func (w *World) Mint(t testing.TB, links httpapi.DashboardLinks, tenantID string) string {
	t.Helper()
	u, _, err := links.MintLink(w.Ctx, tenantID)
	if err != nil {
		t.Fatalf("mint link: %v", err)
	}
	return u
}

// PlanOf is the tenant's plan as stored.
func (w *World) PlanOf(t testing.TB, tenantID string) string {
	t.Helper()
	tn, err := w.Ents.GetTenantRow(w.Ctx, tenantID)
	if err != nil {
		t.Fatal(err)
	}
	return tn.Plan
}

// Use records quantity units of meter for the tenant (a usage event).
func (w *World) Use(t testing.TB, tenantID, meter string, quantity int64) {
	t.Helper()
	if _, err := w.Meter.Ingest(w.Ctx, tenantID, []metering.Event{{ID: Uniq("use"), Meter: meter, Quantity: quantity, Timestamp: time.Now()}}); err != nil {
		t.Fatal(err)
	}
}

// OfferPlans adds, beside Free and Pro (Pro has no Stripe price), a public
// plan with a Stripe price and an internal one with a price too, and
// returns their keys.
func (w *World) OfferPlans(t testing.TB) (gold, staff string) {
	t.Helper()
	gold, staff = Uniq("gold"), Uniq("staff")
	w.Plan(t, catalogue.PlanInput{Key: gold, Name: "Gold", StripePriceID: "price_" + gold,
		Rate:   &catalogue.RateInput{PerSecond: ptr(250.0), Burst: ptr[int64](500)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](2000000)}}, Features: []string{"sso"}})
	// Named by its key: other tests of the package add plans too.
	w.Plan(t, catalogue.PlanInput{Key: staff, Name: "Plan " + staff, StripePriceID: "price_" + staff, Public: ptr(false),
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](900000000)}}})
	return gold, staff
}

// APIJSON calls the API with a bearer token, decodes the answer into out
// (when not nil) and returns the status.
func APIJSON(t testing.TB, method, url, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if out != nil {
		_ = json.NewDecoder(r.Body).Decode(out)
	}
	return r.StatusCode
}
