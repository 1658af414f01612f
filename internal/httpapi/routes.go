package httpapi

import (
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/tollgatehq/tollgate/internal/tracing"
)

// Body limits: JSON APIs take small bodies; usage batches of 1000 events and
// Stripe's events (512 KiB, stripe.md) get more.
const (
	bodyLimitDefault = "64K"
	bodyLimitUsage   = "1M"
)

// routes registers every route of the server. The OpenAPI test checks this
// list against api/openapi.yaml.
func (s *Server) routes() {
	e := s.echo
	e.Use(s.accessLog) // request id in and out, one line per request (accesslog.go)
	e.Use(s.m.observe)
	if tracing.Enabled() {
		e.Use(s.traceRequests) // off, it costs the request path nothing
	}
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableErrorHandler: false, LogErrorFunc: s.logPanic}))
	e.Use(s.rejectBadText) // NUL or invalid UTF-8 in a path or query: 400, for the pages too
	e.Use(s.deadline)      // DATABASE_TIMEOUT: a hung Postgres answers 503, for the pages too

	e.GET("/healthz", s.handleHealthz())
	e.GET("/readyz", s.handleReadyz())
	e.GET("/metrics", s.handleMetrics())
	e.GET("/openapi.yaml", s.handleOpenAPI()) // this build's api/openapi.yaml

	// authFailures counts wrong tokens per client address (429 once out).
	// idempotent: Idempotency-Key on POSTs (idempotency.go).
	// audited: the routes audit.Routes declares record their action (audit.go).
	admin := e.Group("/admin/v1", middleware.BodyLimit(bodyLimitDefault), s.authFailures(AuthAdmin), s.requireAdmin, s.idempotent, s.audited)
	// --- admin: plans and add-ons (catalogue), tenants, plan changes (entitlements), API keys (credentials) ---
	admin.POST("/plans", s.handleCreatePlan())
	admin.GET("/plans", s.handleListPlans())
	admin.GET("/plans/:key", s.handleGetPlan())
	admin.PATCH("/plans/:key", s.handlePatchPlan())
	admin.POST("/plans/:key/migrate", s.handleMigratePlan())
	admin.GET("/addons", s.handleListAddons())
	admin.GET("/addons/:price_id", s.handleGetAddon())
	admin.PUT("/addons/:price_id", s.handlePutAddon())
	admin.DELETE("/addons/:price_id", s.handleDeleteAddon())
	admin.POST("/tenants", s.handleCreateTenant())
	admin.GET("/tenants", s.handleListTenants())
	admin.GET("/tenants/:id", s.handleGetTenant())
	admin.PATCH("/tenants/:id", s.handleUpdateTenant())
	admin.GET("/tenants/:id/explain", s.handleExplainTenant()) // "why this limit"
	admin.PUT("/tenants/:id/plan", s.handleChangePlan())
	admin.POST("/tenants/:id/api-keys", s.handleIssueKey())
	admin.GET("/tenants/:id/api-keys", s.handleListKeys())
	admin.DELETE("/api-keys/:id", s.handleRevokeKey())
	admin.RouteNotFound("/*", s.routeNotFound) // 405 for a known path, wrong method

	// --- admin: overrides (metering) ---
	admin.POST("/tenants/:id/overrides", s.handleCreateOverride())
	admin.GET("/tenants/:id/overrides", s.handleListOverrides())
	admin.DELETE("/tenants/:id/overrides/:override_id", s.handleDeleteOverride())

	// --- admin: Stripe events, replay, resync, drift (billing) ---
	admin.GET("/stripe/events", s.handleListStripeEvents())
	admin.GET("/stripe/events/:id", s.handleGetStripeEvent())
	admin.POST("/stripe/events/:id/replay", s.handleReplayStripeEvent())
	admin.GET("/stripe/drift", s.handleListDrift())
	admin.POST("/tenants/:id/resync", s.handleResyncTenant())

	// --- admin: audit trail ---
	admin.GET("/audit", s.handleListAudit())

	// --- admin: service tokens (credentials) ---
	admin.POST("/service-tokens", s.handleIssueServiceToken())
	admin.GET("/service-tokens", s.handleListServiceTokens())
	admin.DELETE("/service-tokens/:id", s.handleRevokeServiceToken())

	// --- admin: webhook endpoints (notify) ---
	admin.POST("/webhook-endpoints", s.handleCreateWebhookEndpoint())
	admin.GET("/webhook-endpoints", s.handleListWebhookEndpoints())
	admin.GET("/webhook-endpoints/:id", s.handleGetWebhookEndpoint())
	admin.PATCH("/webhook-endpoints/:id", s.handlePatchWebhookEndpoint())
	admin.DELETE("/webhook-endpoints/:id", s.handleDeleteWebhookEndpoint())
	admin.POST("/webhook-endpoints/:id/rotate-secret", s.handleRotateWebhookSecret())
	admin.GET("/webhook-endpoints/:id/deliveries", s.handleListWebhookDeliveries())
	admin.POST("/webhook-endpoints/:id/deliveries/:delivery_id/retry", s.handleRetryWebhookDelivery())
	admin.POST("/webhook-endpoints/:id/events/:event_id/replay", s.handleReplayWebhookEvent())

	// --- admin: grants and top-ups (credits) ---
	admin.POST("/tenants/:id/grants", s.handleCreateGrant())
	admin.GET("/tenants/:id/grants", s.handleListGrants())
	admin.POST("/grants/:id/void", s.handleVoidGrant())
	admin.GET("/topups", s.handleListTopups())
	admin.GET("/topups/:price_id", s.handleGetTopup())
	admin.PUT("/topups/:price_id", s.handlePutTopup())
	admin.DELETE("/topups/:price_id", s.handleDeleteTopup())

	// --- service API /service/v1: the limiter's remote loaders ---
	// A service token or ADMIN_TOKEN; read-only, no tenant rate limit (the
	// calls are rare: a snapshot or counter missing from Redis).
	svc := e.Group("/service/v1", middleware.BodyLimit(bodyLimitDefault), s.authFailures(AuthAdmin), s.requireService)
	svc.GET("/tenants/:id/snapshot", s.handleServiceSnapshot())
	svc.GET("/tenants/:id/usage", s.handleServiceUsage())
	svc.GET("/tenants/:id/grants", s.handleServiceGrants())
	svc.RouteNotFound("/*", s.routeNotFound)

	// --- admin: dashboard links (web) ---
	admin.POST("/tenants/:id/dashboard-links", s.handleMintDashboardLink())

	// --- tenant API /v1 (API key; every route passes the tenant's rate limit) ---
	// v1 authenticates the API key; routes add their own body limits.
	// authFailures (failed keys per client address; a valid key always passes) and
	// rateLimit (the tenant's rate, cost 1, headers on every response).
	v1mw := []echo.MiddlewareFunc{s.authFailures(AuthTenant), s.requireTenant, s.rateLimit}
	v1 := e.Group("/v1", v1mw...)
	// POST /v1/check (its own decision: cost, quota) is the hot path: its
	// middleware is wrapped around it once, here, instead of by echo on
	// every request (echo v4 applies a group's middleware per request: 1.6%
	// of the api's CPU under load). Same chain, same order as the group's.
	e.POST("/v1/check", withMiddleware(s.handleCheck(), v1mw...))
	v1.DELETE("/leases/:id", s.handleReleaseLease())
	v1.GET("/entitlements", s.handleEntitlements())
	// 405 for a known path with a wrong method (after authentication).
	v1.RouteNotFound("/*", s.routeNotFound)
	// Reservations ("reserve": true on /v1/check): a settlement beyond the
	// quota is recorded, never refused (it passes the rate limit like every
	// /v1 call; a 429 keeps the reservation for a retry).
	v1.POST("/reservations/:id/settle", s.handleSettleReservation(), middleware.BodyLimit(bodyLimitDefault))
	v1.DELETE("/reservations/:id", s.handleCancelReservation())
	v1.GET("/usage", s.handleUsage())                                                     // metering: never consumes quota
	v1.POST("/usage/events", s.handleUsageEvents(), middleware.BodyLimit(bodyLimitUsage)) // metering: never consumes quota

	// --- Stripe webhook ---
	// No body-limit middleware: the handler reads the raw body through
	// http.MaxBytesReader (512 KiB) because the signature covers its bytes.
	e.POST("/webhooks/stripe", s.handleStripeWebhook())

	// --- web: /dashboard and /admin (html) ---
}

// withMiddleware wraps h in mw as echo does for a route's middleware (the
// first one outermost), once.
func withMiddleware(h echo.HandlerFunc, mw ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

func (s *Server) logPanic(c echo.Context, err error, stack []byte) error {
	s.log.ErrorContext(c.Request().Context(), "handler panicked", "route", c.Path(), "err", err, "stack", string(stack))
	return err
}
