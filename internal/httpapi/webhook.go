package httpapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/billing"
)

// handleStripeWebhook takes Stripe's signed events. The body is read raw
// (the signature covers its exact bytes) through a 512 KiB limit before
// anything parses it; the event is stored with its job before the 2xx, so
// Stripe retries anything we did not keep.
func (s *Server) handleStripeWebhook() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Billing == nil {
			return apperr.New(apperr.Unavailable, "Stripe webhooks are not configured: STRIPE_WEBHOOK_SECRET is empty")
		}
		r := c.Request()
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, billing.MaxWebhookBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				s.Billing.CountTooLarge()
				return apperr.New(apperr.TooLarge, "Stripe event over %d bytes", mbe.Limit)
			}
			return apperr.New(apperr.Invalid, "reading the body failed: %v", err)
		}
		rc, err := s.Billing.Receive(r.Context(), body, r.Header.Get("Stripe-Signature"))
		if err != nil {
			return err
		}
		// On the request's span (a no-op while tracing is off).
		trace.SpanFromContext(r.Context()).SetAttributes(attribute.String("stripe.event_id", rc.ID),
			attribute.String("stripe.event_type", rc.Type), attribute.Bool("stripe.duplicate", rc.Duplicate))
		return c.JSON(http.StatusOK, rc)
	}
}
