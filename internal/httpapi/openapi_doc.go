package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/api"
)

// handleOpenAPI serves the OpenAPI document this build was made with, so
// that a client generator or validator can point at a running api.
func (s *Server) handleOpenAPI() echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-cache")
		return c.Blob(http.StatusOK, "application/yaml", api.OpenAPI)
	}
}
