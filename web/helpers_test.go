package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is one test's world: the real API server with the web registered
// on it, on the package's database and the test's own Redis prefix.
type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	store  *limitstore.Store
	ents   *entitlements.Service
	cat    *catalogue.Service
	keys   *credentials.Service
	meter  *metering.Service
	web    *Web
	srv    *httptest.Server
	api    *httpapi.Server
	admin  string // admin token (ADMIN_TOKEN: actor "admin")
	alice  string // a named admin credential (ADMIN_TOKENS: actor "alice")
	trail  *audit.Log
	creds  *credits.Service
	free   string // this test's default plan
	pro    string // a bigger plan
	// fallbacks counts the limiter's fail-mode decisions (Redis slower
	// than the timeout): a quota decided so is allowed but not counted.
	fallbacks atomic.Int64
	// cachedRefusals counts refusals the limiter answered from its local
	// refusal cache (no Redis round trip).
	cachedRefusals atomic.Int64
}

func uniq(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

func ptr[T any](v T) *T { return &v }

// setupOpts change the world of one test.
type setupOpts struct {
	// stripeBase, when set, configures billing against stripe-mock there and
	// makes billing the console's plan changer (as cmd/api does with
	// STRIPE_SECRET_KEY).
	stripeBase string
	// contact is BILLING_CONTACT.
	contact string
	// publicURL is PUBLIC_URL.
	publicURL string
}

func setup(t testing.TB, opts ...setupOpts) *bundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	log := slog.New(slog.DiscardHandler)
	b := &bundle{ctx: ctx, pool: pool, rdb: rdb, prefix: prefix, store: limitstore.New(rdb, prefix),
		admin: "tga_" + uniq("admin"), alice: "tga_" + uniq("alice-token"), free: uniq("free"), pro: uniq("pro")}
	b.ents = entitlements.NewService(pool, b.store, log, entitlements.Options{DefaultPlan: b.free})
	b.cat = catalogue.NewService(pool, log, catalogue.Options{Touch: b.ents.TouchCatalogue})
	b.keys = credentials.New(pool, b.ents, log, credentials.Options{Redis: rdb, Prefix: prefix})
	// keys.Run is not started: without it Authenticate asks Postgres every
	// time, which is what these tests want to see.
	b.meter = metering.NewService(pool, b.store, log, metering.Options{Snapshot: b.ents.ReloadSnapshot})
	// Grants go to Redis, where the limiter draws them, as in cmd/api.
	b.creds = credits.NewService(pool, b.ents, b.cat, log, credits.Options{Grants: b.store})
	// The limiter gives Redis 50 ms by default, then decides by the fail
	// modes for a cooldown: a quota fails open, allowing a request without
	// counting it (limiter.md). On a loaded CI machine (-race, Chromium,
	// other packages on the same Redis) one reply can take longer, and
	// checks the tests count on went uncounted. These tests are about the
	// pages, not the fail modes (internal/httpapi tests those), so the
	// timeout is generous and a fallback is recorded for the tests to
	// assert on.
	lim, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Loader: b.ents.ReloadSnapshot, UsageLoader: b.meter.LoadUsage,
		GrantLoader: b.creds.RedisGrants,
		Timeout:     10 * time.Second,
		Hooks: limiter.Hooks{OnFallback: func(string, limiter.FailMode) { b.fallbacks.Add(1) },
			OnRefusalCacheHit: func(string) { b.cachedRefusals.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	guard := httpapi.NewAuthLimiter(lim, httpapi.AuthLimitOptions{Limit: 5, Window: time.Minute})
	ins, err := jobs.NewInsertClient(pool, log)
	if err != nil {
		t.Fatal(err)
	}
	bo := billing.Options{Credits: b.creds}
	if o.stripeBase != "" {
		bo.SecretKey, bo.APIBase, bo.StripeTimeout = "sk_test_123", o.stripeBase, 5*time.Second
	}
	bill, err := billing.New(pool, b.ents, b.cat, ins, log, bo)
	if err != nil {
		t.Fatal(err)
	}
	var plans entitlements.PlanChanger = b.ents
	var upgrades Upgrader // as cmd/api: self-serve plan changes need Stripe
	var topups TopupBuyer // and so does buying credits
	if o.stripeBase != "" {
		plans, upgrades, topups = bill, bill, bill
	}
	b.trail = audit.New(pool, log)
	readers.Register(b.trail, b.ents, b.cat, b.keys, bill, b.creds)
	named := map[string]string{"alice": b.alice}
	w, err := New(Deps{Log: log, DB: pool, Limits: b.store, Snapshots: b.ents, Usage: b.meter, AdminToken: b.admin, DefaultPlan: b.free,
		Entitlements: b.ents, Catalogue: b.cat, Credentials: b.keys, Billing: bill, Metering: b.meter,
		AdminTokens: named, Audit: b.trail, Upgrades: upgrades, Attempts: lim, BillingContact: o.contact, PublicURL: o.publicURL,
		Plans: plans, PlanAdmin: b.cat, Addons: b.cat, Keys: b.keys, Overrides: b.ents, Explainer: b.ents, Replayer: bill, Resyncer: bill, Guard: guard,
		Tenants: b.ents, Previews: b.ents, Grants: b.creds, Topups: topups})
	if err != nil {
		t.Fatal(err)
	}
	b.web = w
	api, err := httpapi.NewServer(httpapi.Deps{Log: log, DB: pool, Redis: rdb, AdminToken: b.admin, AdminTokens: named, Audit: b.trail,
		Entitlements: b.ents, Catalogue: b.cat, Credentials: b.keys, Metering: b.meter, PlanChanger: plans, Limiter: lim, AuthLimiter: guard, DashboardLinks: w, Credits: b.creds})
	if err != nil {
		t.Fatal(err)
	}
	w.Register(api.Echo())
	b.api = api
	b.srv = httptest.NewServer(api)
	t.Cleanup(func() { b.srv.Close(); cancel(); _ = lim.Close() })

	b.plan(t, catalogue.PlanInput{Key: b.free, Name: "Free",
		Rate:   &catalogue.RateInput{PerSecond: ptr(100.0), Burst: ptr[int64](100)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}}})
	b.plan(t, catalogue.PlanInput{Key: b.pro, Name: "Pro",
		Quotas:   map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100000)}, "exports": {Limit: ptr[int64](50), Mode: "soft"}},
		Features: []string{"exports"}})
	return b
}

func (b *bundle) plan(t testing.TB, in catalogue.PlanInput) {
	t.Helper()
	if _, err := b.cat.CreatePlan(b.ctx, in); err != nil {
		t.Fatalf("create plan: %v", err)
	}
}

func (b *bundle) tenant(t testing.TB, name, plan string) entitlements.Tenant {
	t.Helper()
	tn, err := b.ents.CreateTenant(b.ctx, entitlements.TenantInput{Name: name, Plan: plan})
	if err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	return tn
}

func (b *bundle) key(t testing.TB, tenantID string) credentials.IssuedKey {
	t.Helper()
	k, err := b.keys.IssueKey(b.ctx, tenantID, "test")
	if err != nil {
		t.Fatalf("issue key: %v", err)
	}
	return k
}

func (b *bundle) mint(t testing.TB, tenantID string) string {
	t.Helper()
	u, _, err := b.web.MintLink(b.ctx, tenantID)
	if err != nil {
		t.Fatalf("mint link: %v", err)
	}
	return u
}

// browser is an HTTP client with cookies that does not follow redirects, so
// that tests see each 303.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func (b *bundle) browser(t testing.TB) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: b.srv.URL, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type resp struct {
	status int
	body   string
	header http.Header
}

func (br *browser) do(req *http.Request) resp {
	br.t.Helper()
	r, err := br.c.Do(req)
	if err != nil {
		br.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return resp{status: r.StatusCode, body: string(body), header: r.Header}
}

func (br *browser) get(path string) resp {
	br.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, br.base+path, nil)
	return br.do(req)
}

func (br *browser) post(path string, form url.Values) resp {
	br.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, br.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return br.do(req)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of a page's forms.
func csrf(t testing.TB, body string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf token in page:\n%s", body)
	}
	return m[1]
}

// loginLink logs br in through a dashboard link.
func (br *browser) loginLink(link string) resp {
	br.t.Helper()
	page := br.get(link)
	if page.status != http.StatusOK {
		br.t.Fatalf("GET %s = %d, want 200:\n%s", link, page.status, page.body)
	}
	u, _ := url.Parse(link)
	return br.post("/dashboard/login", url.Values{"csrf": {csrf(br.t, page.body)}, "token": {u.Query().Get("token")}})
}

func (br *browser) loginKey(key string) resp {
	br.t.Helper()
	page := br.get("/dashboard/login")
	return br.post("/dashboard/login", url.Values{"csrf": {csrf(br.t, page.body)}, "api_key": {key}})
}

func (br *browser) loginAdmin(token string) resp {
	br.t.Helper()
	page := br.get("/admin/login")
	return br.post("/admin/login", url.Values{"csrf": {csrf(br.t, page.body)}, "token": {token}})
}

func wantStatus(t testing.TB, r resp, want int, what string) {
	t.Helper()
	if r.status != want {
		body := r.body
		if len(body) > 3000 {
			body = body[:3000]
		}
		t.Fatalf("%s: status %d, want %d\n%s", what, r.status, want, body)
	}
}

func wantRedirect(t testing.TB, r resp, to, what string) {
	t.Helper()
	if r.status != http.StatusSeeOther || r.header.Get("Location") != to {
		t.Fatalf("%s: status %d Location %q, want 303 to %q\n%.2000s", what, r.status, r.header.Get("Location"), to, r.body)
	}
}

// quotaRows adds the quota editor's rows to a plan form, each written
// "meter limit mode [per_seat]".
func quotaRows(v url.Values, rows ...string) url.Values {
	for i, r := range rows {
		f := strings.Fields(r)
		name := func(field string) string { return "quotas[" + strconv.Itoa(i) + "]." + field }
		v.Set(name("meter"), f[0])
		v.Set(name("limit"), f[1])
		v.Set(name("mode"), f[2])
		if len(f) > 3 && f[3] == "per_seat" {
			v.Set(name("per_seat"), "1")
		}
	}
	v.Set("quota_rows", strconv.Itoa(len(rows)))
	return v
}
