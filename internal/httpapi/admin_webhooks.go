package httpapi

import (
	"net/http"

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
