package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// explained is the explain answer: the limits, and the grants beside them.
type explained struct {
	entitlements.Explanation
	// Grants are the tenant's grants that can still be drawn (active and
	// pending), per meter in the order they are drawn; absent without
	// credits wired.
	Grants []credits.Grant `json:"grants,omitempty"`
}

// handleExplainTenant answers GET /admin/v1/tenants/{id}/explain: each
// enforced limit with what set it (entitlements.Explain), overrides named
// with who created them when the audit trail knows, and the credit grants
// that are drawn after the quotas, in their order.
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
		out := explained{Explanation: e}
		if s.Credits != nil {
			gs, err := s.Credits.List(ctx, e.TenantID)
			if err != nil {
				return err
			}
			out.Grants = credits.Drawable(gs)
		}
		return c.JSON(http.StatusOK, out)
	}
}
