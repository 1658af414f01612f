// Package httpapi is Tollgate's HTTP server: the admin API, the tenant API,
// the Stripe webhook intake and health, all on echo. Every route is listed in
// routes.go; every error becomes problem+json in problem.go.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/idempotency"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/notify"
	"github.com/tollgatehq/tollgate/internal/serve"
	"github.com/tollgatehq/tollgate/limiter"
)

// Deps is what the server needs; cmd/api wires it.
type Deps struct {
	Log      *slog.Logger
	DB       *pgxpool.Pool
	Redis    redis.UniversalClient
	Registry *prometheus.Registry // where the server's metrics register; /metrics serves it
	// AdminToken guards /admin/v1/* (compared in constant time); its actor
	// name in the audit trail is "admin".
	AdminToken string
	// AdminTokens are further named admin credentials (name → token).
	AdminTokens map[string]string
	// Audit records every admin action; nil records nothing.
	Audit *audit.Log
	// Entitlements serves tenants, overrides and /v1/entitlements.
	Entitlements *entitlements.Service
	// Catalogue serves plans and add-ons, and tells POST /v1/check which
	// meters a plan defines.
	Catalogue *catalogue.Service
	// Credentials checks the API keys of /v1/* and the service tokens of
	// the limiter's loaders, and serves their admin routes.
	Credentials *credentials.Service
	// Metering records usage events and answers GET /v1/usage.
	Metering *metering.Service
	// PlanChanger changes plans for PUT /admin/v1/tenants/{id}/plan; nil
	// means Entitlements (a local change, no Stripe).
	PlanChanger entitlements.PlanChanger
	// Limiter decides the tenants' rate limits on /v1/* and POST /v1/check;
	// nil turns rate limiting off (tests of other areas).
	Limiter *limiter.Limiter
	// AuthLimiter limits failed authentication per client IP; nil means
	// NewAuthLimiter(Limiter, AuthLimitOptions{}) when Limiter is set.
	AuthLimiter *AuthLimiter
	// Billing takes Stripe's webhooks and serves the admin's Stripe views
	// (events, replay, resync, drift); nil answers those routes 503.
	Billing *billing.Service
	// Notify manages the webhook endpoints; nil answers their routes 503.
	Notify *notify.Service
	// Credits keeps grants and top-ups; nil answers their routes 503.
	Credits *credits.Service
	// DashboardLinks mints the tenant dashboard's login links (web); nil
	// answers POST /admin/v1/tenants/{id}/dashboard-links 503.
	DashboardLinks DashboardLinks
	// RequestTimeout (DATABASE_TIMEOUT) is every request's deadline, the
	// pages' included; 0 sets none. OutboundTimeout is added for the routes
	// that call Stripe (default 10s, billing's per-call bound).
	RequestTimeout, OutboundTimeout time.Duration
	// TrustedProxies (TRUSTED_PROXIES): whose X-Forwarded-Proto (or
	// Forwarded proto=) says the client came over TLS, for HSTS.
	TrustedProxies []netip.Prefix
	// MetricsToken (METRICS_TOKEN), when set, guards GET /metrics.
	MetricsToken string
	// MetricsElsewhere: metrics have a listener of their own (METRICS_ADDR),
	// so without MetricsToken the public GET /metrics is 404.
	MetricsElsewhere bool
}

// Server is the HTTP API.
type Server struct {
	Deps
	log  *slog.Logger
	echo *echo.Echo
	m    *httpMetrics
	idem *idempotency.Store // Idempotency-Key on admin POSTs; nil without DB
}

// NewServer builds the server with every route registered.
func NewServer(d Deps) (*Server, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.AdminToken == "" {
		return nil, errors.New("httpapi: AdminToken is required")
	}
	if d.Entitlements == nil {
		return nil, errors.New("httpapi: Entitlements is required")
	}
	if d.Catalogue == nil {
		return nil, errors.New("httpapi: Catalogue is required")
	}
	if d.Credentials == nil {
		return nil, errors.New("httpapi: Credentials is required")
	}
	if d.OutboundTimeout == 0 {
		d.OutboundTimeout = defaultOutboundTimeout
	}
	if d.AuthLimiter == nil && d.Limiter != nil {
		d.AuthLimiter = NewAuthLimiter(d.Limiter, AuthLimitOptions{})
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	s := &Server{Deps: d, log: d.Log, echo: e}
	if d.DB != nil {
		s.idem = idempotency.New(d.DB)
	}
	m, err := newHTTPMetrics(d.Registry)
	if err != nil {
		return nil, err
	}
	s.m = m
	e.HTTPErrorHandler = s.errorHandler
	e.Pre(s.securityHeaders) // every answer, 404s and the pages included
	s.routes()
	s.m.initRoutes(e.Routes())
	return s, nil
}

// ServeHTTP makes Server an http.Handler. HEAD is served on every GET
// route (RFC 9110 §9.3.2: the GET's headers, no body): echo registers no
// HEAD routes (HEAD was a 405, and a 404 on /dashboard/login), so the
// request is routed as a GET on a copy while net/http, which holds the
// original HEAD request, drops whatever body the handler writes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		g := r.WithContext(r.Context())
		g.Method = http.MethodGet
		r = g
	}
	s.echo.ServeHTTP(w, r)
}

// Echo exposes the router to tests that list the registered routes.
func (s *Server) Echo() *echo.Echo { return s.echo }

// ListenAndServe serves on addr until ctx ends, then drains for at most
// drain. ready, when not nil, receives the bound address.
func ListenAndServe(ctx context.Context, h http.Handler, addr string, drain time.Duration, ready func(addr string)) error {
	return serve.ListenAndServe(ctx, h, addr, drain, ready)
}
