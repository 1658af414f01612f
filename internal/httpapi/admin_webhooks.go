package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/notify"
)

// notifier is Deps.Notify, or a 503 when the server has none.
func (s *Server) notifier() (*notify.Service, error) {
	if s.Notify == nil {
		return nil, apperr.New(apperr.Unavailable, "webhooks are not configured on this server")
	}
	return s.Notify, nil
}

// handleCreateWebhookEndpoint answers POST /admin/v1/webhook-endpoints:
// 201 with the signing secret, shown this once.
func (s *Server) handleCreateWebhookEndpoint() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		var in notify.EndpointInput
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		e, err := n.Create(c.Request().Context(), in)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusCreated, e)
	}
}

// handleListWebhookEndpoints answers GET /admin/v1/webhook-endpoints.
func (s *Server) handleListWebhookEndpoints() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		l, err := n.List(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"endpoints": l})
	}
}

// handleGetWebhookEndpoint answers GET /admin/v1/webhook-endpoints/{id}.
func (s *Server) handleGetWebhookEndpoint() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		e, err := n.Get(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, e)
	}
}

// handlePatchWebhookEndpoint answers PATCH /admin/v1/webhook-endpoints/{id}.
func (s *Server) handlePatchWebhookEndpoint() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		var p notify.EndpointPatch
		if err := decodeJSON(c, &p); err != nil {
			return err
		}
		e, err := n.Patch(c.Request().Context(), c.Param("id"), p)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, e)
	}
}

// handleDeleteWebhookEndpoint answers DELETE /admin/v1/webhook-endpoints/{id}.
func (s *Server) handleDeleteWebhookEndpoint() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		if err := n.Delete(c.Request().Context(), c.Param("id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

// handleRotateWebhookSecret answers POST …/{id}/rotate-secret: the new
// secret, shown this once; the old one signs beside it for 24 hours.
func (s *Server) handleRotateWebhookSecret() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		e, err := n.RotateSecret(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, e)
	}
}

// handleListWebhookDeliveries answers GET …/{id}/deliveries?limit=&before=:
// newest first, with each one's status, attempts and last answer.
func (s *Server) handleListWebhookDeliveries() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		limit, err := queryLimit(c)
		if err != nil {
			return err
		}
		var before int64
		if v := c.QueryParam("before"); v != "" {
			if before, err = strconv.ParseInt(v, 10, 64); err != nil || before <= 0 {
				return apperr.Invalidf("before", "must be a delivery id (a whole number)")
			}
		}
		l, err := n.Deliveries(c.Request().Context(), c.Param("id"), limit, before)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"deliveries": l})
	}
}

// handleRetryWebhookDelivery answers POST …/{id}/deliveries/{delivery_id}/retry:
// a pending or failed delivery is sent now.
func (s *Server) handleRetryWebhookDelivery() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		did, err := strconv.ParseInt(c.Param("delivery_id"), 10, 64)
		if err != nil {
			return notify.ErrDeliveryNotFound
		}
		d, err := n.RetryNow(c.Request().Context(), c.Param("id"), did)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusAccepted, d)
	}
}

// handleReplayWebhookEvent answers POST …/{id}/events/{event_id}/replay:
// the event is sent to the endpoint again, with the same webhook-id.
func (s *Server) handleReplayWebhookEvent() echo.HandlerFunc {
	return func(c echo.Context) error {
		n, err := s.notifier()
		if err != nil {
			return err
		}
		d, err := n.Replay(c.Request().Context(), c.Param("id"), c.Param("event_id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusAccepted, d)
	}
}
