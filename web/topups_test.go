package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

// "Buy more" on the dashboard: with a Stripe key and a mapped top-up, the
// tenant picks a quantity and is sent to Checkout in payment mode (through
// stripe-go, against stripe-mock) for its own tenant, with the top-up in the
// session's metadata so that its completion grants it; nothing is granted
// before Stripe says so. A bad quantity or a price that is not a top-up is a
// 400 naming the field that reaches no Stripe; no top-up mapped, or no
// Stripe key, offers nothing.
func TestDashboardBuyMoreSendsToCheckoutInPaymentMode(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setup(t, setupOpts{stripeBase: rec.URL})
	br, tn, page, tok := b.tenantBrowser(t, "Initech", b.free)
	if strings.Contains(page.body, "Buy more") {
		t.Fatal("Buy more is offered with no top-up mapped")
	}
	price := "price_topup_" + uniq("p")
	amount, in := int64(10000), "720h"
	if _, _, err := b.creds.PutTopup(b.ctx, price, credits.TopupInput{Meter: "requests", Amount: &amount, ExpiresIn: &in}); err != nil {
		t.Fatal(err)
	}
	page = br.get("/dashboard")
	wantIn(t, page.body, `id="credits"`, "Buy more", `data-topup="`+price+`"`, "10,000 requests", "valid 30 days after purchase")

	// A forged tenant field is ignored: the session's tenant is the one.
	other := b.tenant(t, "Globex", b.free)
	r := br.post("/dashboard/topups", url.Values{"csrf": {tok}, "price_id": {price}, "quantity": {"3"}, "tenant_id": {other.ID}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "https://checkout.stripe.com/") {
		t.Fatalf("buy: %d Location %q\n%.2000s", r.status, r.header.Get("Location"), r.body)
	}
	sessions := rec.Posts("/v1/checkout/sessions")
	if len(sessions) != 1 {
		t.Fatalf("%d checkout sessions, want 1", len(sessions))
	}
	f := sessions[0].Form
	if f.Get("mode") != "payment" || f.Get("client_reference_id") != tn.ID || f.Get("line_items[0][price]") != price ||
		f.Get("line_items[0][quantity]") != "3" || f.Get("metadata[topup_price_id]") != price || f.Get("metadata[topup_quantity]") != "3" ||
		f.Get("metadata[tenant_id]") != tn.ID || f.Get("customer") == "" ||
		f.Get("success_url") != b.srv.URL+"/dashboard?topup=bought#credits" || f.Get("cancel_url") != b.srv.URL+"/dashboard?topup=kept#credits" {
		t.Fatalf("checkout params %v", f)
	}
	if gs, _ := b.creds.List(b.ctx, tn.ID); len(gs) != 0 {
		t.Fatalf("starting Checkout granted %+v", gs)
	}
	wantIn(t, br.get("/dashboard?topup=bought").body, "Stripe has your payment")

	for _, c := range []struct {
		form  url.Values
		field string
	}{
		{url.Values{"price_id": {price}, "quantity": {"0"}}, "quantity"},
		{url.Values{"price_id": {price}, "quantity": {"lots"}}, "quantity"},
		{url.Values{"price_id": {price}, "quantity": {"101"}}, "quantity"},
		{url.Values{"price_id": {"price_not_a_topup"}, "quantity": {"1"}}, "price_id"},
	} {
		c.form.Set("csrf", tok)
		r := br.post("/dashboard/topups", c.form)
		wantStatus(t, r, http.StatusBadRequest, "bad purchase "+c.form.Encode())
		wantIn(t, r.body, `id="topup-error"`, c.field+":")
	}
	if n := len(rec.Posts("/v1/checkout/sessions")); n != 1 {
		t.Fatalf("bad purchases reached Stripe: %d sessions", n)
	}

	// Without a Stripe key nothing is offered, and the route is not there.
	nb := setup(t)
	if _, _, err := nb.creds.PutTopup(nb.ctx, price, credits.TopupInput{Meter: "requests", Amount: &amount}); err != nil {
		t.Fatal(err)
	}
	nbr, _, npage, ntok := nb.tenantBrowser(t, "Keyless", nb.free)
	if strings.Contains(npage.body, "Buy more") {
		t.Fatal("Buy more is offered without a Stripe key")
	}
	wantStatus(t, nbr.post("/dashboard/topups", url.Values{"csrf": {ntok}, "price_id": {price}, "quantity": {"1"}}), http.StatusNotFound, "keyless buy")
}
