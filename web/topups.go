package web

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/limiter"
)

// TopupBuyer sends a tenant to Stripe Checkout to buy a top-up
// (billing.Service, with STRIPE_SECRET_KEY); nil hides "Buy more".
type TopupBuyer interface {
	StartTopup(ctx context.Context, tenantID, priceID string, quantity int64, urls billing.UpgradeURLs) (billing.Upgrade, error)
}

// topupNotices confirm the return from Stripe (?topup=…).
var topupNotices = map[string]string{
	"bought": "Stripe has your payment. The credits are added as soon as Stripe confirms it, usually within seconds: reload this page to see them.",
	"kept":   "You left Stripe without buying anything.",
}

// handleDashboardBuyTopup sends the session's tenant to Stripe Checkout
// for the top-up it picked. The tenant is the session's, never the form's;
// a price that is not a top-up or a bad quantity is a 400 naming the
// field, shown on the dashboard; so is Stripe's refusal, with nothing
// bought.
func (w *Web) handleDashboardBuyTopup() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Topups == nil {
			return apperr.New(apperr.NotFound, "Credits cannot be bought here; ask %s.", contactOf(w.BillingContact).Text)
		}
		ctx := c.Request().Context()
		tid := sessionFrom(c).TenantID
		if w.Attempts != nil {
			// Each attempt makes a Stripe session: bounded as plan changes are.
			d, err := w.Attempts.Allow(ctx, "topup:"+tid, limiter.Request{Limits: &upgradeLimits})
			switch {
			case err != nil:
				w.log.WarnContext(ctx, "top-up attempts not counted", "tenant_id", tid, "err", err)
			case !d.Allowed:
				c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Max(1, math.Ceil(d.RetryAfter.Seconds())))))
				return w.renderTopupError(c, http.StatusTooManyRequests,
					"Too many purchases were started from this account lately. Try again in "+fmtDuration(d.RetryAfter)+".")
			}
		}
		q, err := strconv.ParseInt(strings.TrimSpace(c.FormValue("quantity")), 10, 64)
		if err != nil {
			return w.renderTopupError(c, http.StatusBadRequest, "quantity: must be a whole number from 1 to "+strconv.Itoa(billing.MaxTopupQuantity))
		}
		base := w.publicBase(c)
		up, err := w.Topups.StartTopup(ctx, tid, strings.TrimSpace(c.FormValue("price_id")), q, billing.UpgradeURLs{
			Success: base + "/dashboard?topup=bought#credits",
			Cancel:  base + "/dashboard?topup=kept#credits",
		})
		if e, ok := apperr.As(err); ok && (e.Code == apperr.Invalid || e.Code == apperr.Upstream || e.Code == apperr.Conflict) {
			msg := e.Message
			for _, f := range e.Fields {
				msg = f.Field + ": " + f.Message
			}
			if e.Code != apperr.Invalid {
				msg += " Nothing was bought; try again in a moment."
			}
			return w.renderTopupError(c, apperr.HTTPOf(e.Code).Status, msg)
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, up.URL)
	}
}

func (w *Web) renderTopupError(c echo.Context, status int, msg string) error {
	return w.renderDashboardWith(c, status, func(d *dashboardPage) { d.TopupError = msg })
}
