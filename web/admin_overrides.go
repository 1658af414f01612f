package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// overrideForm is the override form as typed.
type overrideForm struct {
	Meter       string
	Extra       string
	Limit       string
	Mode        string
	Reason      string
	ExpiresDays string
}

func (f overrideForm) input(now time.Time) (entitlements.OverrideInput, error) {
	var v apperr.Validation
	in := entitlements.OverrideInput{Meter: f.Meter, Mode: f.Mode, Reason: f.Reason}
	num := func(field, s string) *int64 {
		if s == "" {
			return nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			v.Add(field, "must be a whole number")
			return nil
		}
		return &n
	}
	in.Extra, in.Limit = num("extra", f.Extra), num("limit", f.Limit)
	in.ExpiresAt = expiresAfterDays(&v, f.ExpiresDays, now)
	return in, v.Err()
}

// expiresAfterDays reads a form's "Expires after (days)" field as a moment
// from now, to the second; empty is nil (never).
func expiresAfterDays(v *apperr.Validation, days string, now time.Time) *time.Time {
	if days == "" {
		return nil
	}
	d, err := strconv.ParseFloat(days, 64)
	if err != nil || d <= 0 || d > 3660 {
		v.Add("expires_days", "must be a number of days between 0 and 3660")
		return nil
	}
	at := now.Add(time.Duration(d * float64(24*time.Hour))).Truncate(time.Second)
	return &at
}

// tenantFormDone answers a form of the tenant page: refused with named
// fields, the page again with the form as typed and the reasons next to it
// (fill puts both in place); failed otherwise, the error; done, a redirect
// to the tenant page at to ("?done=…#section").
func (w *Web) tenantFormDone(c echo.Context, err error, fill func(d *tenantPage, fields []apperr.FieldError), to string) error {
	if fields, status, ok := formError(err); ok {
		p, d, err := w.adminTenant(c)
		if err != nil {
			return err
		}
		fill(&d, fields)
		p.Data = d
		return w.render(c, status, "admin_tenant", p)
	}
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+c.Param("id")+to)
}

// handleAdminAddOverride grants a quota override; a refused form comes back
// filled in, with the reasons next to it.
func (w *Web) handleAdminAddOverride() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Overrides == nil {
			return apperr.New(apperr.NotFound, "overrides are not available")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		if _, err := w.store.tenant(ctx, id); err != nil {
			return err
		}
		f := overrideForm{
			Meter: strings.TrimSpace(c.FormValue("meter")), Extra: strings.TrimSpace(c.FormValue("extra")),
			Limit: strings.TrimSpace(c.FormValue("limit")), Mode: strings.TrimSpace(c.FormValue("mode")),
			Reason: strings.TrimSpace(c.FormValue("reason")), ExpiresDays: strings.TrimSpace(c.FormValue("expires_days")),
		}
		in, err := f.input(w.Now())
		if err == nil {
			var o entitlements.Override
			if o, err = w.Overrides.CreateOverride(ctx, id, in); err == nil {
				c.Set(ctxTarget, o.ID) // the audit entry names the override it created
			}
		}
		return w.tenantFormDone(c, err, func(d *tenantPage, fields []apperr.FieldError) { d.OverForm, d.OverErrs = f, fields },
			"?done=override#overrides")
	}
}

func (w *Web) handleAdminDeleteOverride() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Overrides == nil {
			return apperr.New(apperr.NotFound, "overrides are not available")
		}
		id, oid := c.Param("id"), c.Param("oid")
		if !ids.IsUUID(id) || !ids.IsUUID(oid) {
			return apperr.New(apperr.NotFound, "override not found")
		}
		if !confirmed(c) {
			return w.confirmOverrideRemoval(c, id, oid)
		}
		if err := w.Overrides.DeleteOverride(c.Request().Context(), id, oid); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+id+"?done=deleted#overrides")
	}
}

// confirmOverrideRemoval shows the meter's limit with and without the
// override, against the usage so far.
func (w *Web) confirmOverrideRemoval(c echo.Context, tenantID, overrideID string) error {
	ctx := c.Request().Context()
	t, err := w.store.tenant(ctx, tenantID)
	if err != nil {
		return err
	}
	d := confirmPage{
		Heading: "Remove an override of " + t.Name + "?",
		Lead:    "The override is deleted and the tenant's limits are computed again without it, at once.",
		Action:  "/admin/tenants/" + tenantID + "/overrides/" + overrideID + "/delete",
		Button:  "Remove override",
		Cancel:  "/admin/tenants/" + tenantID + "#overrides",
	}
	if w.Previews != nil {
		e, meter, err := w.Previews.PreviewOverrideRemoval(ctx, tenantID, overrideID)
		if err != nil {
			return err
		}
		used, err := w.usedByMeter(c, tenantID)
		if err != nil {
			return err
		}
		d.Heading = "Remove the " + meter + " override of " + t.Name + "?"
		d.Button = "Remove the " + meter + " override"
		// The override changes one meter: show that one.
		for _, r := range diffLimits(snapshotLimits(e.Before), snapshotLimits(e.After), used) {
			if r.Name == "Quota "+meter {
				d.Limits = append(d.Limits, r)
			}
		}
		if anyOver(d.Limits) {
			d.Warning = "Usage this period already reaches the limit without the override: the tenant's " + meter + " requests are refused from the moment it is removed until the period resets."
		}
	}
	return w.renderConfirm(c, "Confirm override removal", d)
}
