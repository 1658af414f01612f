package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// GrantManager issues, lists and voids a tenant's credit grants
// (credits.Service); nil hides the console's grants panel.
type GrantManager interface {
	List(ctx context.Context, tenantID string) ([]credits.Grant, error)
	Get(ctx context.Context, id string) (credits.Grant, error)
	Create(ctx context.Context, tenantID string, in credits.GrantInput) (credits.Grant, error)
	Void(ctx context.Context, id string) (credits.Grant, error)
	// ListTopups are the one-time prices that buy units ("Buy more").
	ListTopups(ctx context.Context) ([]credits.Topup, error)
}

// grantForm is the grant form as typed.
type grantForm struct {
	Meter       string
	Amount      string
	Priority    string
	ExpiresDays string
	Reason      string
}

// input parses the form; credits validates the values and names its
// fields as the API does (amount, priority, expires_at).
func (f grantForm) input(now time.Time) (credits.GrantInput, error) {
	var v apperr.Validation
	in := credits.GrantInput{Meter: f.Meter, Reason: f.Reason}
	if f.Amount == "" {
		v.Add("amount", "is required: the units the grant gives")
	} else if n, err := strconv.ParseInt(strings.ReplaceAll(f.Amount, ",", ""), 10, 64); err != nil {
		v.Add("amount", "must be a whole number")
	} else {
		in.Amount = &n
	}
	if f.Priority != "" {
		p, err := strconv.Atoi(f.Priority)
		if err != nil {
			v.Add("priority", "must be a whole number, %d (drawn first) to %d", credits.MinPriority, credits.MaxPriority)
		} else {
			in.Priority = &p
		}
	}
	in.ExpiresAt = expiresAfterDays(&v, f.ExpiresDays, now)
	return in, v.Err()
}

// handleAdminAddGrant issues a grant; a refused form comes back filled in,
// with the reasons next to it.
func (w *Web) handleAdminAddGrant() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Grants == nil {
			return apperr.New(apperr.NotFound, "credit grants are not available")
		}
		ctx := c.Request().Context()
		id := c.Param("id")
		if _, err := w.store.tenant(ctx, id); err != nil {
			return err
		}
		f := grantForm{Meter: strings.TrimSpace(c.FormValue("meter")), Amount: strings.TrimSpace(c.FormValue("amount")),
			Priority: strings.TrimSpace(c.FormValue("priority")), ExpiresDays: strings.TrimSpace(c.FormValue("expires_days")),
			Reason: strings.TrimSpace(c.FormValue("reason"))}
		in, err := f.input(w.Now())
		if err == nil {
			var g credits.Grant
			if g, err = w.Grants.Create(ctx, id, in); err == nil {
				c.Set(ctxTarget, g.ID) // the audit entry records the grant it created
			}
		}
		return w.tenantFormDone(c, err, func(d *tenantPage, fields []apperr.FieldError) { d.GrantForm, d.GrantErrs = f, fields },
			"?done=granted#grants")
	}
}

// handleAdminVoidGrant voids a grant after a confirmation that says what
// it still holds.
func (w *Web) handleAdminVoidGrant() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Grants == nil {
			return apperr.New(apperr.NotFound, "credit grants are not available")
		}
		ctx := c.Request().Context()
		id, gid := c.Param("id"), c.Param("gid")
		if !ids.IsUUID(id) || !ids.IsUUID(gid) {
			return apperr.New(apperr.NotFound, "grant not found")
		}
		g, err := w.Grants.Get(ctx, gid)
		if err != nil {
			return err // credits' not found, or a failure that is not one
		}
		if g.TenantID != id {
			return apperr.New(apperr.NotFound, "grant not found")
		}
		if !confirmed(c) {
			t, err := w.store.tenant(ctx, id)
			if err != nil {
				return err
			}
			d := confirmPage{
				Heading: "Void a " + g.Meter + " grant of " + t.Name + "?",
				Lead:    "What the grant still holds is voided at once: nothing more is drawn from it. This cannot be undone.",
				Action:  "/admin/tenants/" + id + "/grants/" + gid + "/void",
				Button:  "Void the grant",
				Cancel:  "/admin/tenants/" + id + "#grants",
				Facts: []fact{{"Remaining", numfmt.Int(g.Remaining) + " of " + numfmt.Int(g.Amount) + " " + g.Meter},
					{"Source", g.Source}, {"Reason", g.Reason}},
			}
			if g.Remaining > 0 {
				d.Warning = numfmt.Int(g.Remaining) + " " + g.Meter + " units the tenant has not used are lost."
			}
			return w.renderConfirm(c, "Confirm voiding a grant", d)
		}
		if _, err := w.Grants.Void(ctx, gid); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/admin/tenants/"+id+"?done=voided#grants")
	}
}
