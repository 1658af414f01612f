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

// grantsOf lists a tenant's grants, as the credits ledger has them but with
// each active grant's remaining as Redis holds it (liveRemaining): the
// console, the dashboard and "Why these limits" show what GET /v1/usage
// answers.
func (w *Web) grantsOf(ctx context.Context, tenantID string) ([]credits.Grant, error) {
	gs, err := w.Grants.List(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	w.liveRemaining(ctx, tenantID, gs)
	return gs, nil
}

// liveRemaining sets each active grant's remaining to what Redis holds,
// where the limiter draws it: the ledger lags by the draws not flushed yet.
// A Redis that does not answer leaves the ledger's figures (the page's
// usage is marked stale then anyway).
func (w *Web) liveRemaining(ctx context.Context, tenantID string, gs []credits.Grant) {
	live := map[string]map[string]int64{}
	for i, g := range gs {
		if g.Status != credits.StatusActive {
			continue
		}
		m, ok := live[g.Meter]
		if !ok {
			var err error
			if m, err = w.Limits.Grants(ctx, tenantID, g.Meter); err != nil {
				w.log.WarnContext(ctx, "reading redis grants failed; showing the ledger's", "tenant_id", tenantID, "meter", g.Meter, "err", err)
				return
			}
			live[g.Meter] = m
		}
		if n, ok := m[g.ID]; ok {
			gs[i].Remaining = n
		}
	}
}
