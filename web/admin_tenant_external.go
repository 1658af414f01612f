package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// handleAdminSetExternalID sets or (empty) removes the tenant's external id
// through the function behind PATCH /admin/v1/tenants/{id}; a refused one
// comes back on the tenant page with the reason next to the field, a taken
// one naming (and linking) the tenant that has it.
func (w *Web) handleAdminSetExternalID() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Tenants == nil {
			return apperr.New(apperr.NotFound, "editing tenants is not available")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		if _, err := w.store.tenant(ctx, id); err != nil {
			return err
		}
		typed := strings.TrimSpace(c.FormValue("external_id"))
		patch := entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true}}
		if typed != "" {
			patch.ExternalID.Value = &typed
		}
		_, err := w.Tenants.UpdateTenant(ctx, id, patch)
		if fields, status, ok := formError(err); ok {
			p, d, err := w.adminTenant(c)
			if err != nil {
				return err
			}
			d.ExtForm, d.ExtErr = typed, fields[0].Message
			if status == http.StatusConflict {
				d.ExtErr = "another tenant already has this external id"
				if other, err := w.store.tenantByExternalID(ctx, typed); err == nil {
					d.ExtTaken = &other
				}
			}
			p.Data = d
			return w.render(c, status, "admin_tenant", p)
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+id+"?done=external")
	}
}

// tenantByExternalID is the tenant that has an external id.
func (s *store) tenantByExternalID(ctx context.Context, ext string) (tenantLink, error) {
	t, err := s.ents.TenantByExternalID(ctx, ext)
	if err != nil {
		return tenantLink{}, fmt.Errorf("web: tenant by external id: %w", err)
	}
	return tenantLink{ID: t.ID, Name: t.Name}, nil
}
