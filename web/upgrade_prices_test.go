package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

// A plan sold through several prices (issue 25): the dashboard lists each
// with its interval, currency and amount as Stripe (stripe-mock) has them,
// and Checkout is sent the one the tenant picked; a price that is not the
// plan's is refused before Stripe.
func TestDashboardOffersEachPriceOfAPlan(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setup(t, setupOpts{stripeBase: rec.URL})
	key := uniq("duo")
	monthly, yearly := "price_m_"+key, "price_y_"+key
	b.plan(t, catalogue.PlanInput{Key: key, Name: "Duo", StripePriceIDs: []string{monthly, yearly},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](5000000)}}})
	br, tn, page, tok := b.tenantBrowser(t, "Pied Piper", b.free)
	sel := page.body[strings.Index(page.body, `data-prices="`+key+`"`):]
	sel = sel[:strings.Index(sel, "</select>")]
	// stripe-mock answers every price with its canned one: monthly, 20.00 USD.
	if !strings.Contains(sel, `value="`+monthly+`" selected`) || !strings.Contains(sel, `value="`+yearly+`"`) || strings.Count(sel, "monthly · USD 20.00") != 2 {
		t.Fatalf("the offer must list both prices with Stripe's interval and amount, the first selected:\n%s", sel)
	}
	r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {key}, "price": {yearly}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "https://checkout.stripe.com/") {
		t.Fatalf("plan change: %d %q", r.status, r.header.Get("Location"))
	}
	sessions := rec.Posts("/v1/checkout/sessions")
	if len(sessions) != 1 || sessions[0].Form.Get("line_items[0][price]") != yearly || sessions[0].Form.Get("client_reference_id") != tn.ID {
		t.Fatalf("checkout sessions %+v, want one for %s", sessions, yearly)
	}
	r = br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {key}, "price": {"price_not_" + key}})
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "price: ") || len(rec.Posts("/v1/checkout/sessions")) != 1 {
		t.Fatalf("a price not of the plan: %d, %d sessions", r.status, len(rec.Posts("/v1/checkout/sessions")))
	}
}

// The default price is the first with the tenant's current interval (and
// currency, when one has both), else the plan's first.
func TestPriceOptionsDefaultToTheCurrentInterval(t *testing.T) {
	t.Parallel()
	info := map[string]billing.PriceInfo{
		"m_usd": {ID: "m_usd", Known: true, Interval: "month", IntervalCount: 1, Currency: "usd", UnitAmount: 2000},
		"y_usd": {ID: "y_usd", Known: true, Interval: "year", IntervalCount: 1, Currency: "usd", UnitAmount: 20000},
		"y_eur": {ID: "y_eur", Known: true, Interval: "year", IntervalCount: 1, Currency: "eur", UnitAmount: 18000},
		"cur":   {ID: "cur", Known: true, Interval: "year", IntervalCount: 1, Currency: "eur", UnitAmount: 9900},
	}
	selected := func(os []PriceOption) string {
		for _, o := range os {
			if o.Selected {
				return o.ID
			}
		}
		return ""
	}
	ids := []string{"m_usd", "y_usd", "y_eur"}
	if got := selected(priceOptions(ids, info, info["cur"])); got != "y_eur" {
		t.Fatalf("yearly EUR tenant: default %s, want y_eur", got)
	}
	if got := selected(priceOptions(ids, info, billing.PriceInfo{ID: "x", Known: true, Interval: "year", IntervalCount: 1, Currency: "gbp"})); got != "y_usd" {
		t.Fatalf("yearly GBP tenant: default %s, want the first yearly, y_usd", got)
	}
	if got := selected(priceOptions(ids, info, billing.PriceInfo{})); got != "m_usd" {
		t.Fatalf("no current price: default %s, want the first", got)
	}
	if l := priceOptions([]string{"y_eur"}, info, billing.PriceInfo{})[0].Label; l != "yearly · EUR 180.00" {
		t.Fatalf("label %q", l)
	}
}
