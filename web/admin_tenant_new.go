package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// tenantForm is the create-tenant form as typed.
type tenantForm struct {
	Name             string
	Plan             string
	StripeCustomerID string
	ExternalID       string
}

type newTenantPage struct {
	Form   tenantForm
	Plans  []PlanRow
	Errors map[string]string // field → message, shown next to the field
	// Taken is the tenant already linked to the Stripe customer typed.
	Taken *tenantLink
	// TakenExt is the tenant that already has the external id typed.
	TakenExt *tenantLink
}

func (w *Web) renderNewTenant(c echo.Context, status int, f tenantForm, errs map[string]string, taken *tenantLink) error {
	return w.renderNewTenantTaken(c, status, f, errs, taken, nil)
}

func (w *Web) renderNewTenantTaken(c echo.Context, status int, f tenantForm, errs map[string]string, taken, takenExt *tenantLink) error {
	plans, err := w.store.plans(c.Request().Context())
	if err != nil {
		return err
	}
	if f.Plan == "" {
		f.Plan = w.DefaultPlan
	}
	return w.render(c, status, "admin_tenant_new", page{Title: "New tenant", Nav: "tenants",
		Data: newTenantPage{Form: f, Plans: plans, Errors: errs, Taken: taken, TakenExt: takenExt}})
}

func (w *Web) handleAdminNewTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Tenants == nil {
			return apperr.New(apperr.NotFound, "creating tenants is not available")
		}
		return w.renderNewTenant(c, http.StatusOK, tenantForm{}, nil, nil)
	}
}

// handleAdminCreateTenant creates a tenant through the function behind
// POST /admin/v1/tenants; a refused form comes back filled in with each
// reason next to its field, a Stripe customer already linked names (and
// links) the tenant that has it.
func (w *Web) handleAdminCreateTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Tenants == nil {
			return apperr.New(apperr.NotFound, "creating tenants is not available")
		}
		ctx := c.Request().Context()
		f := tenantForm{Name: strings.TrimSpace(c.FormValue("name")), Plan: strings.TrimSpace(c.FormValue("plan")),
			StripeCustomerID: strings.TrimSpace(c.FormValue("stripe_customer_id")), ExternalID: strings.TrimSpace(c.FormValue("external_id"))}
		t, err := w.Tenants.CreateTenant(ctx, entitlements.TenantInput{Name: f.Name, Plan: f.Plan, StripeCustomerID: f.StripeCustomerID, ExternalID: f.ExternalID})
		fields, status, ok := formError(err)
		if !ok && err != nil {
			return err
		}
		if ok {
			errs := map[string]string{}
			var taken, takenExt *tenantLink
			for _, fe := range fields {
				field := fe.Field
				if field == "" {
					field = "name"
				}
				msg := fe.Message
				if field == "stripe_customer_id" && status == http.StatusConflict {
					msg = "another tenant is already linked to this Stripe customer"
					if other, err := w.store.tenantByCustomer(ctx, f.StripeCustomerID); err == nil {
						taken = &other
					}
				}
				if field == "external_id" && status == http.StatusConflict {
					msg = "another tenant already has this external id"
					if other, err := w.store.tenantByExternalID(ctx, f.ExternalID); err == nil {
						takenExt = &other
					}
				}
				errs[field] = msg
			}
			return w.renderNewTenantTaken(c, status, f, errs, taken, takenExt)
		}
		return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+t.ID+"?done=tenant")
	}
}
