package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// handleExplainTenant answers GET /admin/v1/tenants/{id}/explain: each
// enforced limit with what set it (entitlements.Explain), overrides named
// with who created them when the audit trail knows.
func (s *Server) handleExplainTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		e, err := s.Entitlements.Explain(ctx, c.Param("id"))
		if err != nil {
			return err
		}
		if len(e.OverrideIDs()) > 0 {
			by, err := s.Audit.Creators(ctx, e.TenantID, "override.create")
			if err != nil {
				// The figures stand without the names; say so in the log only.
				s.log.WarnContext(ctx, "override creators not read", "tenant_id", e.TenantID, "err", err)
			}
			e.AttributeOverrides(by)
		}
		return c.JSON(http.StatusOK, e)
	}
}
