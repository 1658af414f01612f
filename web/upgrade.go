package web

// The dashboard's "Change plan" section (issue 14): the plans a tenant may
// pick, their limits next to its own, and the POST that sends it to Stripe.
// The plan itself changes only when Stripe's webhooks confirm (billing).

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/limiter"
)

// stripeHostedPages are the origins of Stripe Checkout and the customer
// portal, where the plan form's answer redirects.
const stripeHostedPages = "https://checkout.stripe.com https://billing.stripe.com"

// upgradeLimits bound how many plan changes one tenant may start: each
// costs up to two Stripe calls, and someone comparing plans and coming back
// from an abandoned Checkout stays far below it.
var upgradeLimits = limiter.Limits{Windows: []limiter.Window{{Name: "plan-changes", Limit: 10, Length: 10 * time.Minute}}}

// PlanOffer is a plan the dashboard offers.
type PlanOffer struct {
	PlanRow
	Bigger bool // at least as much of every meter as the current plan, and more of one
	// Prices are the plan's Stripe prices a tenant may pick (with Stripe);
	// the one Selected is the default: the tenant's current interval.
	Prices []PriceOption
}

// PriceOption is one price of an offered plan.
type PriceOption struct {
	billing.PriceInfo
	Label    string // "monthly · USD 20.00", or the price id when Stripe did not say
	Selected bool
}

// priceLabel words a price for a tenant.
func priceLabel(p billing.PriceInfo) string {
	if !p.Known {
		return p.ID
	}
	every := map[string]string{"day": "daily", "week": "weekly", "month": "monthly", "year": "yearly"}[p.Interval]
	switch {
	case p.Interval == "":
		every = "once"
	case p.IntervalCount > 1:
		every = fmt.Sprintf("every %d %ss", p.IntervalCount, p.Interval)
	}
	return fmt.Sprintf("%s · %s %s", every, strings.ToUpper(p.Currency), fmtMinorUnits(p.UnitAmount, p.Currency))
}

// fmtMinorUnits writes an amount in a currency's smallest unit: two
// decimals except for Stripe's zero-decimal currencies.
func fmtMinorUnits(amount int64, currency string) string {
	switch strings.ToLower(currency) {
	case "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf":
		return strconv.FormatInt(amount, 10)
	}
	return fmt.Sprintf("%d.%02d", amount/100, amount%100)
}

// priceOptions lists a plan's prices and selects the default: the first
// with the tenant's current interval (and currency, when one matches
// both), else the plan's first price.
func priceOptions(ids []string, info map[string]billing.PriceInfo, current billing.PriceInfo) []PriceOption {
	out := make([]PriceOption, 0, len(ids))
	for _, id := range ids {
		p, ok := info[id]
		if !ok {
			p = billing.PriceInfo{ID: id}
		}
		out = append(out, PriceOption{PriceInfo: p, Label: priceLabel(p)})
	}
	pick := -1
	if current.Known {
		for i, o := range out {
			if o.Known && o.Interval == current.Interval && o.IntervalCount == current.IntervalCount {
				if o.Currency == current.Currency {
					pick = i
					break
				}
				if pick < 0 {
					pick = i
				}
			}
		}
	}
	if pick < 0 && len(out) > 0 {
		pick = 0
	}
	if pick >= 0 {
		out[pick].Selected = true
	}
	return out
}

// planChoice is the data of the "Change plan" section.
type planChoice struct {
	Current    *PlanRow // the plan the tenant has now (nil when unknown)
	Offers     []PlanOffer
	SelfServe  bool // Stripe is configured: each offer has a button
	Subscribed bool // a subscription that Stripe changes in its portal
	Contact    contact
	Error      string // why the last attempt did not start
}

// contact is whom a tenant asks when it cannot change plan itself.
type contact struct {
	Text string
	Href string // mailto: or http(s); "" = plain text
}

func contactOf(s string) contact {
	switch {
	case s == "":
		return contact{Text: "your account manager, or the team that gave you this dashboard"}
	case strings.Contains(s, "://"):
		return contact{Text: s, Href: s}
	default:
		return contact{Text: s, Href: "mailto:" + s}
	}
}

// planChoiceOf picks the plans to offer: public ones other than the
// current, and, when the tenant can pay through Stripe, only those with a
// Stripe price (the others cannot be bought).
func (w *Web) planChoiceOf(ctx context.Context, plans []PlanRow, u UsageView) planChoice {
	pc := planChoice{SelfServe: w.Upgrades != nil, Contact: contactOf(w.BillingContact),
		Subscribed: u.Sub != nil && u.Sub.Status != "canceled" && u.Sub.Status != "incomplete_expired"}
	bigger := map[string]bool{}
	for _, p := range upgrades(plans, u.Snap.Plan) {
		bigger[p.Key] = true
	}
	for i, p := range plans {
		switch {
		case p.Key == u.Snap.Plan:
			pc.Current = &plans[i]
		case p.Public && (p.StripePriceID != "" || !pc.SelfServe):
			pc.Offers = append(pc.Offers, PlanOffer{PlanRow: p, Bigger: bigger[p.Key]})
		}
	}
	if pc.SelfServe && len(pc.Offers) > 0 {
		// One read of every price shown (cached by billing), and of the
		// current subscription's, whose interval is the default.
		var ids []string
		for _, o := range pc.Offers {
			ids = append(ids, o.StripePriceIDs...)
		}
		curPrice := ""
		if u.Sub != nil {
			curPrice = u.Sub.PriceID
			ids = append(ids, curPrice)
		}
		info := w.Upgrades.Prices(ctx, ids)
		for i := range pc.Offers {
			pc.Offers[i].Prices = priceOptions(pc.Offers[i].StripePriceIDs, info, info[curPrice])
		}
	}
	return pc
}

// handleDashboardChangePlan sends the session's tenant to Stripe for the
// plan it picked. The tenant is the session's, never the form's; a plan it
// is not offered is a 400 naming "plan", and Stripe's refusal or silence is
// shown on the dashboard with nothing changed.
func (w *Web) handleDashboardChangePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		if w.Upgrades == nil {
			return apperr.New(apperr.NotFound, "Plans cannot be changed here; ask %s.", contactOf(w.BillingContact).Text)
		}
		ctx := c.Request().Context()
		tid := sessionFrom(c).TenantID
		if w.Attempts != nil {
			d, err := w.Attempts.Allow(ctx, "plan-change:"+tid, limiter.Request{Limits: &upgradeLimits})
			switch {
			case err != nil:
				// Redis trouble: Stripe calls are not free, but refusing a
				// paying customer for our outage is worse.
				w.log.WarnContext(ctx, "plan change attempts not counted", "tenant_id", tid, "err", err)
			case !d.Allowed:
				c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Max(1, math.Ceil(d.RetryAfter.Seconds())))))
				return w.renderPlanError(c, http.StatusTooManyRequests,
					"Too many plan changes were started from this account lately. Try again in "+fmtDuration(d.RetryAfter)+".")
			}
		}
		base := w.publicBase(c)
		up, err := w.Upgrades.StartUpgradePrice(ctx, tid, strings.TrimSpace(c.FormValue("plan")), strings.TrimSpace(c.FormValue("price")), billing.UpgradeURLs{
			Success: base + "/dashboard?plan=changed#plan",
			Cancel:  base + "/dashboard?plan=kept#plan",
		})
		if e, ok := apperr.As(err); ok && (e.Code == apperr.Invalid || e.Code == apperr.Upstream || e.Code == apperr.Conflict) {
			msg := e.Message
			for _, f := range e.Fields {
				msg = f.Field + ": " + f.Message
			}
			if e.Code != apperr.Invalid {
				msg += " Nothing was changed; try again in a moment."
			}
			return w.renderPlanError(c, apperr.HTTPOf(e.Code).Status, msg)
		}
		if err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, up.URL)
	}
}

// renderPlanError shows the dashboard with msg in the plan section.
func (w *Web) renderPlanError(c echo.Context, status int, msg string) error {
	return w.renderDashboardWith(c, status, func(d *dashboardPage) { d.Choice.Error = msg })
}

// renderDashboardWith answers the dashboard with status, after set put a
// message (a refused form's reason) in place.
func (w *Web) renderDashboardWith(c echo.Context, status int, set func(d *dashboardPage)) error {
	p, err := w.dashboard(c, nil)
	if err != nil {
		return err
	}
	d := p.Data.(dashboardPage)
	set(&d)
	p.Data = d
	return w.render(c, status, "dashboard", p)
}

// planNotices confirm the return from Stripe (?plan=…).
var planNotices = map[string]string{
	"changed": "Stripe has your plan change. Your new limits apply as soon as Stripe confirms the payment, usually within seconds: reload this page to see them.",
	"kept":    "You left Stripe without changing anything; your plan is as it was.",
}

// publicBase is how people reach this server: PUBLIC_URL, else the
// request's own scheme and host.
func (w *Web) publicBase(c echo.Context) string {
	if base := strings.TrimRight(w.PublicURL, "/"); base != "" {
		return base
	}
	scheme := "http"
	if secureRequest(c.Request()) {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s", scheme, c.Request().Host)
}
