package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/web/webtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is one test's world: the real API server with the web registered
// on it, on the package's database and the test's own Redis prefix. The
// services are webtest's (shared with the browser tests in web/browser);
// the short fields name them as web's tests always have.
type bundle struct {
	*webtest.World
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
}

var uniq = webtest.Uniq

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
	w := webtest.New(t, webtest.Options{StripeBase: o.stripeBase})
	b := &bundle{World: w, ctx: w.Ctx, pool: w.Pool, rdb: w.Redis, prefix: w.Prefix, store: w.Store, ents: w.Ents, cat: w.Cat, keys: w.Keys,
		meter: w.Meter, admin: w.Admin, alice: w.Alice, trail: w.Trail, creds: w.Creds, free: w.Free, pro: w.Pro}
	var upgrades Upgrader // as cmd/api: self-serve plan changes need Stripe
	var topups TopupBuyer // and so does buying credits
	if w.Stripe {
		upgrades, topups = w.Billing, w.Billing
	}
	pages, err := New(Deps{Log: slog.New(slog.DiscardHandler), DB: w.Pool, Limits: w.Store, Snapshots: w.Ents, Usage: w.Meter,
		AdminToken: w.Admin, DefaultPlan: w.Free, Entitlements: w.Ents, Catalogue: w.Cat, Credentials: w.Keys, Billing: w.Billing, Metering: w.Meter,
		AdminTokens: w.AdminTokens, Audit: w.Trail, Upgrades: upgrades, Attempts: w.Limiter, BillingContact: o.contact, PublicURL: o.publicURL,
		Plans: w.Plans, PlanAdmin: w.Cat, Addons: w.Cat, Keys: w.Keys, Overrides: w.Ents, Explainer: w.Ents, Replayer: w.Billing,
		Resyncer: w.Billing, Guard: w.Guard, Tenants: w.Ents, Previews: w.Ents, Grants: w.Creds, Topups: topups})
	if err != nil {
		t.Fatal(err)
	}
	b.web = pages
	b.srv, b.api = w.Serve(t, pages)
	return b
}

func (b *bundle) plan(t testing.TB, in catalogue.PlanInput) { t.Helper(); b.Plan(t, in) }

func (b *bundle) tenant(t testing.TB, name, plan string) entitlements.Tenant {
	t.Helper()
	return b.Tenant(t, name, plan)
}

func (b *bundle) key(t testing.TB, tenantID string) credentials.IssuedKey {
	t.Helper()
	return b.Key(t, tenantID)
}

func (b *bundle) mint(t testing.TB, tenantID string) string {
	t.Helper()
	return b.Mint(t, b.web, tenantID)
}

var apiJSON = webtest.APIJSON

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
