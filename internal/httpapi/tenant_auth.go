package httpapi

import (
	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// ctxTenantID is the context key requireTenant sets.
const ctxTenantID = "tollgate.tenant_id"

// requireTenant authenticates /v1/* by API key (Authorization: Bearer
// tg_…) and puts the tenant into the request context.
func (s *Server) requireTenant(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		raw, ok := bearer(c)
		if !ok {
			return apperr.New(apperr.Unauthorized, "missing bearer token: send Authorization: Bearer <API key>")
		}
		suspect, _ := c.Get(ctxSuspect).(bool)
		info, err := s.Credentials.AuthenticateKey(c.Request().Context(), raw, suspect)
		if err != nil {
			return err
		}
		c.Set(ctxTenantID, info.TenantID)
		return next(c)
	}
}

// tenantIDFrom is the tenant requireTenant authenticated ("" outside /v1).
func tenantIDFrom(c echo.Context) string {
	id, _ := c.Get(ctxTenantID).(string)
	return id
}
