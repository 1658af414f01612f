package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// handleCreateOverride answers POST /admin/v1/tenants/{id}/overrides.
func (s *Server) handleCreateOverride() echo.HandlerFunc {
	return func(c echo.Context) error {
		var in entitlements.OverrideInput
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		o, err := s.Entitlements.CreateOverride(c.Request().Context(), c.Param("id"), in)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, o)
	}
}

// handleListOverrides answers GET /admin/v1/tenants/{id}/overrides.
func (s *Server) handleListOverrides() echo.HandlerFunc {
	return func(c echo.Context) error {
		l, err := s.Entitlements.ListOverrides(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"overrides": l})
	}
}

// handleDeleteOverride answers DELETE /admin/v1/tenants/{id}/overrides/{override_id}.
func (s *Server) handleDeleteOverride() echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.Entitlements.DeleteOverride(c.Request().Context(), c.Param("id"), c.Param("override_id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
