package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// DashboardLinks mints single-use dashboard login links (the web package).
// An unknown tenant is apperr NotFound.
type DashboardLinks interface {
	MintLink(ctx context.Context, tenantID string) (url string, expiresAt time.Time, err error)
}

type dashboardLinkResponse struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// handleMintDashboardLink is POST /admin/v1/tenants/{id}/dashboard-links:
// 201 {"url": "/dashboard/login?token=…", "expires_at": …}.
func (s *Server) handleMintDashboardLink() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.DashboardLinks == nil {
			return apperr.New(apperr.Unavailable, "dashboard links are not configured on this server")
		}
		u, exp, err := s.DashboardLinks.MintLink(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		// The link is a credential: no cache, proxy or browser may keep it.
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusCreated, dashboardLinkResponse{URL: u, ExpiresAt: exp})
	}
}
