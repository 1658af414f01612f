package httpapi

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"
)

// outboundRoutes call Stripe (each call bounded by billing's StripeTimeout)
// between their Postgres steps, so their deadline is Deps.RequestTimeout plus
// Deps.OutboundTimeout: cutting a Stripe call that went through would leave
// Stripe changed and Tollgate not (until the webhook comes).
var outboundRoutes = map[string]bool{
	"PUT /admin/v1/tenants/:id/plan":    true,
	"POST /admin/v1/tenants/:id/resync": true,
	"POST /admin/tenants/:id/plan":      true, // the console's plan change
	"POST /admin/tenants/:id/resync":    true,
	"POST /dashboard/plan":              true, // Checkout, the customer portal, a price swap
}

// deadline bounds every request's wait on Postgres (and anything else that
// honours the context): past Deps.RequestTimeout its queries fail with
// context.DeadlineExceeded, which the error handler answers 503 with
// Retry-After. Without it a hung Postgres (connections accepted, nothing
// answered) held ingest and GET /v1/usage for 10 to over 20 seconds, as long
// as the client waited.
func (s *Server) deadline(next echo.HandlerFunc) echo.HandlerFunc {
	if s.RequestTimeout <= 0 {
		return next
	}
	return func(c echo.Context) error {
		d := s.RequestTimeout
		if outboundRoutes[c.Request().Method+" "+c.Path()] {
			d += s.OutboundTimeout
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), d)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}

// defaultOutboundTimeout is billing.DefaultStripeTimeout's figure, used when
// Deps.OutboundTimeout is zero.
const defaultOutboundTimeout = 10 * time.Second
