// Package web is Tollgate's browser side: the tenant usage dashboard at
// /dashboard and the billing admin console at /admin. Pages are rendered on
// the server from html/template files parsed once at start; CSS is embedded;
// charts are SVG drawn in Go; nothing needs JavaScript.
//
// Rules the package keeps:
//   - Sessions live in web_sessions; the cookie holds a random id whose
//     SHA-256 is the only thing stored. Cookies are HttpOnly, SameSite=Lax,
//     Secure behind TLS, and scoped to /dashboard or /admin.
//   - Every POST carries the session's CSRF token (the login forms a
//     pre-session double-submit token), compared in constant time.
//   - A tenant session reads only its own tenant: every dashboard query takes
//     the tenant id from the session, never from the URL; another tenant's
//     object is a 404.
//   - SQL only over the web's own tables (web_sessions, dashboard_links);
//     every other table is read through its owner (readers.go) and changed
//     through the other parts' services (actions.go). Live counters come
//     from the limiter's Redis.
package web

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/notify"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Deps is what the web needs; cmd/api wires it. Action services left nil hide
// their forms.
type Deps struct {
	Log *slog.Logger
	DB  *pgxpool.Pool
	// Limits reads the limiter's live counters (usage not yet flushed to
	// Postgres, today's refusals).
	Limits *limitstore.Store
	// Snapshots gives a tenant's effective entitlements (plan after the
	// subscription status rules, overrides, period). Required.
	Snapshots Snapshots
	// Usage computes the usage of the current period (GET /v1/usage's
	// function). Required.
	Usage UsageReader
	// Entitlements, Catalogue, Credentials, Billing and Metering are the
	// owners the pages read tenants and subscriptions; plans; API keys;
	// Stripe events and repairs; usage history and meter reports through
	// (readers.go). Required.
	Entitlements EntitlementsReader
	Catalogue    CatalogueReader
	Credentials  CredentialsReader
	Billing      BillingReader
	Metering     MeteringReader
	// AdminToken logs into the console (compared in constant time) as
	// "admin". Required.
	AdminToken string
	// AdminTokens are further named admin credentials (name → token); the
	// audit trail records console actions under the name.
	AdminTokens map[string]string
	// Audit records every console action; nil records nothing.
	Audit *audit.Log
	// Actions; nil hides the form that needs it.
	Plans     entitlements.PlanChanger
	PlanAdmin PlanAdmin
	// Addons manages add-on grants; nil hides the add-ons page's forms.
	Addons    AddonAdmin
	Keys      KeyManager
	Overrides OverrideManager
	// Grants issues and voids credit grants (the tenant page's panel);
	// nil shows no panel.
	Grants GrantManager
	// Topups sends tenants to Stripe to buy credits (billing, with a
	// Stripe key); nil hides the dashboard's "Buy more".
	Topups TopupBuyer
	// Webhooks manages outbound webhook endpoints (admin_webhooks.go); nil
	// hides the webhooks pages.
	Webhooks *notify.Service
	// Explainer fills the tenant page's "Why these limits" panel; nil hides it.
	Explainer Explainer
	Replayer  EventReplayer
	Resyncer  Resyncer
	// Tenants creates tenants; nil hides the create-tenant form.
	Tenants TenantCreator
	// Previews shows the effect of a change on its confirmation page (a
	// plan edit's comes from PlanAdmin, shown alike only when Previews is
	// set); nil still asks for the confirmation, without the figures.
	Previews Previewer
	// Upgrades lets tenants change plan through Stripe from the dashboard;
	// nil (no STRIPE_SECRET_KEY) shows the plans and whom to ask.
	Upgrades Upgrader
	// Attempts bounds self-serve plan change attempts per tenant
	// (upgradeLimits); nil = unbounded.
	Attempts AttemptLimiter
	// BillingContact (BILLING_CONTACT) is the email address or URL tenants
	// are told to ask about plan changes when they cannot make them
	// themselves; empty = "your account manager".
	BillingContact string
	// Guard limits failed logins (API key, admin token, used links) per
	// client IP; nil means no limit beyond the secrets' strength.
	Guard LoginGuard
	// PublicURL is how people reach the api (PUBLIC_URL), the base of the
	// dashboard links the console shows; empty = the request's own host.
	PublicURL string
	// DefaultPlan is the plan tenants fall back to when their subscription
	// lapses (DEFAULT_PLAN), named on the dashboard; default "free".
	DefaultPlan string
	// TenantTTL and AdminTTL are how long sessions last; default 12h and 8h.
	TenantTTL time.Duration
	AdminTTL  time.Duration
	// RedisTimeout bounds the pages' reads of live counters; default
	// 250ms (REDIS_TIMEOUT). Past it a page shows Postgres's figures with a
	// notice that they may be behind.
	RedisTimeout time.Duration
	// Now is the clock of the pages (time until reset, projections);
	// default time.Now.
	Now func() time.Time
}

// Web serves the dashboard and the console.
type Web struct {
	Deps
	log   *slog.Logger
	store *store
	pages map[string]*template.Template
}

// New parses the templates (once) and returns the web.
func New(d Deps) (*Web, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.DB == nil || d.Snapshots == nil || d.Usage == nil || d.Limits == nil {
		return nil, errors.New("web: DB, Limits, Snapshots and Usage are required")
	}
	if d.Entitlements == nil || d.Catalogue == nil || d.Credentials == nil || d.Billing == nil || d.Metering == nil {
		return nil, errors.New("web: Entitlements, Catalogue, Credentials, Billing and Metering are required")
	}
	if d.AdminToken == "" {
		return nil, errors.New("web: AdminToken is required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.DefaultPlan == "" {
		d.DefaultPlan = "free"
	}
	if d.RedisTimeout <= 0 {
		d.RedisTimeout = 250 * time.Millisecond
	}
	if d.TenantTTL <= 0 {
		d.TenantTTL = 12 * time.Hour
	}
	if d.AdminTTL <= 0 {
		d.AdminTTL = 8 * time.Hour
	}
	w := &Web{Deps: d, log: d.Log, store: &store{db: d.DB, ents: d.Entitlements, cat: d.Catalogue, creds: d.Credentials, bill: d.Billing, meter: d.Metering}}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	w.pages = pages
	return w, nil
}

// parsePages builds one template per page: the layout plus the page's file.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, fmt.Errorf("web: parse layout: %w", err)
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: list templates: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, "templates/"), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, fmt.Errorf("web: parse %s: %w", f, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Register adds the /dashboard*, /admin* (HTML) and /static/* routes to e.
func (w *Web) Register(e *echo.Echo) {
	// Forms are small: 64 KiB is far more than any of them needs.
	limit := middleware.BodyLimit("64K")
	tenant := []echo.MiddlewareFunc{w.html, limit, w.requireSession(kindTenant), w.checkCSRF}
	// audited: the routes audit.Routes declares record their action (audit.go).
	admin := []echo.MiddlewareFunc{w.html, limit, w.requireSession(kindAdmin), w.checkCSRF, w.audited}
	open := []echo.MiddlewareFunc{w.html, limit, w.checkCSRF}

	e.GET("/static/*", w.handleStatic())
	e.GET("/favicon.ico", w.handleFavicon())

	e.GET("/dashboard/login", w.handleDashboardLoginPage(), open...)
	e.POST("/dashboard/login", w.handleDashboardLogin(), open...)
	e.POST("/dashboard/logout", w.handleLogout(kindTenant), tenant...)
	e.GET("/dashboard", w.handleDashboard(), tenant...)
	e.GET("/dashboard/usage.csv", w.handleDashboardUsageCSV(), tenant...)
	e.POST("/dashboard/keys", w.handleDashboardIssueKey(), tenant...)
	e.POST("/dashboard/keys/:id/revoke", w.handleDashboardRevokeKey(), tenant...)
	e.POST("/dashboard/plan", w.handleDashboardChangePlan(), tenant...)
	e.POST("/dashboard/topups", w.handleDashboardBuyTopup(), tenant...)
	e.RouteNotFound("/dashboard/*", w.handleNotFound(), w.html)

	e.GET("/admin/login", w.handleAdminLoginPage(), open...)
	e.POST("/admin/login", w.handleAdminLogin(), open...)
	e.POST("/admin/logout", w.handleLogout(kindAdmin), admin...)
	e.GET("/admin", w.handleAdminHome(), admin...)
	e.GET("/admin/tenants", w.handleAdminTenants(), admin...)
	e.GET("/admin/tenants/new", w.handleAdminNewTenant(), admin...)
	e.POST("/admin/tenants", w.handleAdminCreateTenant(), admin...)
	e.GET("/admin/tenants/:id", w.handleAdminTenant(), admin...)
	e.POST("/admin/tenants/:id/plan", w.handleAdminChangePlan(), admin...)
	e.POST("/admin/tenants/:id/external-id", w.handleAdminSetExternalID(), admin...)
	e.POST("/admin/tenants/:id/keys", w.handleAdminIssueKey(), admin...)
	e.POST("/admin/tenants/:id/keys/:key/revoke", w.handleAdminRevokeKey(), admin...)
	e.POST("/admin/tenants/:id/overrides", w.handleAdminAddOverride(), admin...)
	e.POST("/admin/tenants/:id/overrides/:oid/delete", w.handleAdminDeleteOverride(), admin...)
	e.POST("/admin/tenants/:id/grants", w.handleAdminAddGrant(), admin...)
	e.POST("/admin/tenants/:id/grants/:gid/void", w.handleAdminVoidGrant(), admin...)
	e.POST("/admin/tenants/:id/dashboard-link", w.handleAdminMintLink(), admin...)
	e.POST("/admin/tenants/:id/resync", w.handleAdminResync(), admin...)
	e.GET("/admin/plans", w.handleAdminPlans(), admin...)
	e.POST("/admin/plans", w.handleAdminCreatePlan(), admin...)
	e.GET("/admin/plans/:key", w.handleAdminPlan(), admin...)
	e.POST("/admin/plans/:key", w.handleAdminEditPlan(), admin...)
	e.GET("/admin/addons", w.handleAdminAddons(), admin...)
	e.POST("/admin/addons", w.handleAdminPutAddon(), admin...)
	e.POST("/admin/addons/:price/delete", w.handleAdminDeleteAddon(), admin...)
	w.webhookRoutes(e, admin)
	e.GET("/admin/events", w.handleAdminEvents(), admin...)
	e.GET("/admin/events/:id", w.handleAdminEvent(), admin...)
	e.POST("/admin/events/replay", w.handleAdminBulkReplay(), admin...)
	e.POST("/admin/events/:id/replay", w.handleAdminReplay(), admin...)
	e.GET("/admin/drift", w.handleAdminDrift(), admin...)
	e.GET("/admin/metering", w.handleAdminMetering(), admin...)
	e.GET("/admin/audit", w.handleAdminAudit(), admin...)
	e.RouteNotFound("/admin/*", w.handleNotFound(), w.html)
}

// page is what every template gets.
type page struct {
	Title    string
	Area     string // "dashboard" or "admin"
	Nav      string // the active navigation item
	CSRF     string
	LoggedIn bool
	Notice   string // a one-line confirmation shown on top
	Data     any
}

// render writes the page with status.
func (w *Web) render(c echo.Context, status int, name string, p page) error {
	t, ok := w.pages[name]
	if !ok {
		return fmt.Errorf("web: no template %q", name)
	}
	if p.CSRF == "" {
		p.CSRF = sessionFrom(c).CSRF
	}
	if p.Area == "" {
		p.Area = "dashboard"
		if strings.HasPrefix(c.Request().URL.Path, "/admin") {
			p.Area = "admin"
		}
	}
	p.LoggedIn = sessionFrom(c).Kind != ""
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		return fmt.Errorf("web: render %s: %w", name, err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// errorPage is the data of the error template.
type errorPage struct {
	Status  int
	Heading string
	Message string
	Fields  []apperr.FieldError
	Back    string
}

func (w *Web) renderError(c echo.Context, status int, heading, msg string) error {
	return w.render(c, status, "error", page{Title: heading, Data: errorPage{Status: status, Heading: heading, Message: msg, Back: backLink(c)}})
}

// backLink is where the error page's "back" goes: the area's home.
func backLink(c echo.Context) string {
	if strings.HasPrefix(c.Request().URL.Path, "/admin") {
		return "/admin"
	}
	return "/dashboard"
}

// html sets the headers every page gets and turns the errors handlers
// return into HTML error pages (the API's problem+json is for programs).
func (w *Web) html(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		formAction := "'self'"
		if strings.HasPrefix(c.Request().URL.Path, "/dashboard") {
			// The plan form's answer redirects to Stripe's hosted Checkout or
			// customer portal, and form-action also governs that redirect.
			formAction += " " + stripeHostedPages
		}
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action "+formAction+"; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// Login links carry a token in the URL: never send it on as a Referer.
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		err := next(c)
		if err == nil || c.Response().Committed {
			return err
		}
		if errors.Is(err, errTooManyLogins) {
			c.Response().Header().Set("Retry-After", "60")
			return w.renderError(c, http.StatusTooManyRequests, "Too many failed logins",
				"Too many failed logins came from your address. Wait a minute, then try again.")
		}
		e, ok := apperr.As(err)
		if !ok {
			var he *echo.HTTPError
			if errors.As(err, &he) && he.Code < 500 {
				return w.renderError(c, he.Code, http.StatusText(he.Code), fmt.Sprint(he.Message))
			}
			if apperr.Transient(err) {
				// Postgres or Redis down: a 503 to retry, not a 500.
				w.log.WarnContext(c.Request().Context(), "page: dependency unavailable", "route", c.Path(), "err", err)
				c.Response().Header().Set("Retry-After", "1")
				return w.renderError(c, http.StatusServiceUnavailable, "Try again shortly", "The database or cache does not answer right now. Try again in a moment.")
			}
			w.log.ErrorContext(c.Request().Context(), "page failed", "method", c.Request().Method, "route", c.Path(), "err", err)
			return w.renderError(c, http.StatusInternalServerError, "Something went wrong", "The server failed; the error was logged. Try again in a moment.")
		}
		answer := apperr.HTTPOf(e.Code)
		status, heading := answer.Status, answer.Heading
		if e.Code == apperr.Unavailable {
			c.Response().Header().Set("Retry-After", "1")
		}
		return w.render(c, status, "error", page{Title: heading, Data: errorPage{
			Status: status, Heading: heading, Message: e.Message, Fields: e.Fields, Back: backLink(c)}})
	}
}

func (w *Web) handleNotFound() echo.HandlerFunc {
	return func(c echo.Context) error {
		return apperr.New(apperr.NotFound, "There is no page at %s.", c.Request().URL.Path)
	}
}

func (w *Web) handleStatic() echo.HandlerFunc {
	sub, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(sub))
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=3600")
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

// handleFavicon serves the icon browsers ask for at /favicon.ico whatever
// the page says (a 404 there filled logs and showed no icon).
func (w *Web) handleFavicon() echo.HandlerFunc {
	icon, err := staticFS.ReadFile("static/favicon.ico")
	if err != nil {
		panic("web: favicon missing from the embedded files: " + err.Error())
	}
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=86400")
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		return c.Blob(http.StatusOK, "image/x-icon", icon)
	}
}

// handleLogout deletes the session row and the cookie.
func (w *Web) handleLogout(kind string) echo.HandlerFunc {
	name, path, to := cookieTenant, "/dashboard", "/dashboard/login"
	if kind == kindAdmin {
		name, path, to = cookieAdmin, "/admin", "/admin/login"
	}
	return func(c echo.Context) error {
		if err := w.store.deleteSession(c.Request().Context(), sessionFrom(c)); err != nil {
			return err
		}
		clearCookie(c, name, path)
		return c.Redirect(http.StatusSeeOther, to+"?out=1")
	}
}
