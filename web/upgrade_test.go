package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

// tenantBrowser logs a new tenant on plan into its dashboard and returns
// the browser, the dashboard page and the CSRF token of its forms.
func (b *bundle) tenantBrowser(t *testing.T, name, plan string) (*browser, entitlements.Tenant, resp, string) {
	t.Helper()
	tn := b.tenant(t, name, plan)
	br := b.browser(t)
	wantRedirect(t, br.loginKey(b.key(t, tn.ID).Key), "/dashboard", "login")
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	return br, tn, page, csrf(t, page.body)
}

// Without STRIPE_SECRET_KEY the section lists the public plans with their
// limits next to the tenant's and says whom to ask, with no button; a
// crafted POST is a 404 that changes nothing.
func TestDashboardPlansWithoutStripeSayWhomToAsk(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{contact: "billing@example.com"})
	gold, staff := b.OfferPlans(t)
	br, tn, page, tok := b.tenantBrowser(t, "Hooli", b.free)
	for _, want := range []string{`id="plan-h">Change plan`, `<a href="mailto:billing@example.com">billing@example.com</a>`,
		"Gold", "2,000,000", "250/s", "Pro", "100,000", "your plan", "1,000"} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("dashboard lacks %q", want)
		}
	}
	if strings.Contains(page.body, staff) {
		t.Fatal("an internal plan is offered to a tenant")
	}
	if strings.Contains(page.body, `action="/dashboard/plan"`) {
		t.Fatal("without Stripe there must be no plan change button")
	}
	r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {gold}})
	wantStatus(t, r, http.StatusNotFound, "plan change without Stripe")
	if !strings.Contains(r.body, "billing@example.com") {
		t.Fatal("the refusal must say whom to ask")
	}
	if b.PlanOf(t, tn.ID) != b.free {
		t.Fatal("a refused plan change changed the plan")
	}

	// Without BILLING_CONTACT: the account manager.
	b2 := setup(t)
	_, _, page2, _ := b2.tenantBrowser(t, "Initech", b2.free)
	if !strings.Contains(page2.body, "ask your account manager, or the team that gave you this dashboard") {
		t.Fatal("without BILLING_CONTACT the page must name the account manager")
	}
}

// With Stripe: public plans with a price are offered (not the unpriced pro,
// not the internal staff); choosing one redirects to the Checkout URL that
// Stripe answered, for the session's own tenant, and grants nothing.
func TestDashboardPlanChangeRedirectsToCheckout(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setup(t, setupOpts{stripeBase: rec.URL})
	gold, staff := b.OfferPlans(t)
	other := b.tenant(t, "Globex", b.free)
	br, tn, page, tok := b.tenantBrowser(t, "Hooli", b.free)
	if !strings.Contains(page.body, `data-plan="`+gold+`"`) || !strings.Contains(page.body, "Upgrade to Gold") {
		t.Fatal("the priced public plan has no button")
	}
	if strings.Contains(page.body, `data-plan="`+b.pro+`"`) || strings.Contains(page.body, staff) {
		t.Fatal("an unpriced or internal plan is offered")
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://checkout.stripe.com https://billing.stripe.com") {
		t.Fatalf("CSP %q must let the plan form go on to Stripe", csp)
	}

	// A forged tenant field is ignored: the session's tenant is the one.
	r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {gold}, "tenant_id": {other.ID}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "https://checkout.stripe.com/") {
		t.Fatalf("plan change: %d Location %q\n%.2000s", r.status, r.header.Get("Location"), r.body)
	}
	sessions := rec.Posts("/v1/checkout/sessions")
	if len(sessions) != 1 {
		t.Fatalf("%d checkout sessions, want 1", len(sessions))
	}
	f := sessions[0].Form
	if f.Get("client_reference_id") != tn.ID || f.Get("line_items[0][price]") != "price_"+gold || f.Get("mode") != "subscription" ||
		f.Get("success_url") != b.srv.URL+"/dashboard?plan=changed#plan" || f.Get("cancel_url") != b.srv.URL+"/dashboard?plan=kept#plan" {
		t.Fatalf("checkout params %v", f)
	}
	if b.PlanOf(t, tn.ID) != b.free || b.PlanOf(t, other.ID) != b.free {
		t.Fatal("starting Checkout granted a plan")
	}
	if back := br.get("/dashboard?plan=changed"); !strings.Contains(back.body, "Stripe has your plan change") {
		t.Fatal("the return from Checkout must say what happens next")
	}
	if back := br.get("/dashboard?plan=kept"); !strings.Contains(back.body, "without changing anything") {
		t.Fatal("the return from an abandoned Checkout must say nothing changed")
	}
}

// Bad input: an internal plan (crafted POST), an unknown or empty plan, or a
// missing CSRF token is a 4xx naming the problem, reaches no Stripe, and
// changes nothing; Stripe refusing or down shows its message, never a 500.
func TestDashboardPlanChangeRefusals(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setup(t, setupOpts{stripeBase: rec.URL})
	gold, staff := b.OfferPlans(t)
	br, tn, _, tok := b.tenantBrowser(t, "Hooli", b.free)
	for _, plan := range []string{staff, b.pro, "no-such-plan", ""} {
		r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {plan}})
		wantStatus(t, r, http.StatusBadRequest, "plan "+plan)
		if !strings.Contains(r.body, `id="plan-error"`) || !strings.Contains(r.body, "plan: ") || !strings.Contains(r.body, "is not a plan you can choose") {
			t.Fatalf("plan %q: the page must name the field plan:\n%.3000s", plan, r.body)
		}
	}
	wantStatus(t, br.post("/dashboard/plan", url.Values{"plan": {gold}}), http.StatusForbidden, "no CSRF token")
	if rec.Count() != 0 || b.PlanOf(t, tn.ID) != b.free {
		t.Fatalf("refused changes reached Stripe %d times or changed the plan", rec.Count())
	}
	if cus, _ := b.ents.GetTenantRow(b.ctx, tn.ID); cus.StripeCustomerID != "" {
		t.Fatal("a refused change created a customer")
	}

	rec.Refuse("/v1/checkout/sessions", "No such price: 'price_"+gold+"'")
	r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {gold}})
	wantStatus(t, r, http.StatusBadGateway, "Stripe refuses")
	if !strings.Contains(r.body, "No such price") || !strings.Contains(r.body, "Nothing was changed") || !strings.Contains(r.body, `id="plan-h"`) {
		t.Fatalf("Stripe's refusal must show on the dashboard:\n%.3000s", r.body)
	}
	if b.PlanOf(t, tn.ID) != b.free {
		t.Fatal("a refused Checkout changed the plan")
	}

	b2 := setup(t, setupOpts{stripeBase: stripemock.Unreachable(t)})
	gold2, _ := b2.OfferPlans(t)
	br2, tn2, _, tok2 := b2.tenantBrowser(t, "Pied Piper", b2.free)
	r = br2.post("/dashboard/plan", url.Values{"csrf": {tok2}, "plan": {gold2}})
	wantStatus(t, r, http.StatusBadGateway, "Stripe down")
	if !strings.Contains(r.body, "could not be reached") {
		t.Fatalf("a down Stripe must be said so:\n%.3000s", r.body)
	}
	if tn, _ := b2.ents.GetTenantRow(b2.ctx, tn2.ID); tn.Plan != b2.free || tn.StripeCustomerID != "" {
		t.Fatal("a down Stripe changed the tenant")
	}
}

// A tenant may start a bounded number of plan changes (each costs Stripe
// calls): past upgradeLimits the page answers 429 with Retry-After and
// Stripe is not called.
func TestDashboardPlanChangeAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setup(t, setupOpts{stripeBase: rec.URL})
	gold, _ := b.OfferPlans(t)
	br, _, _, tok := b.tenantBrowser(t, "Hooli", b.free)
	limit := int(upgradeLimits.Windows[0].Limit)
	for i := 0; i < limit; i++ {
		if r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {gold}}); r.status != http.StatusSeeOther {
			t.Fatalf("attempt %d: %d, want 303", i+1, r.status)
		}
	}
	calls := rec.Count()
	r := br.post("/dashboard/plan", url.Values{"csrf": {tok}, "plan": {gold}})
	wantStatus(t, r, http.StatusTooManyRequests, "attempt over the bound")
	if r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "Too many plan changes") {
		t.Fatalf("429 without Retry-After or explanation: %q\n%.2000s", r.header.Get("Retry-After"), r.body)
	}
	if rec.Count() != calls {
		t.Fatal("a refused attempt reached Stripe")
	}
	// Another tenant is not held back by this one's attempts.
	br2, _, _, tok2 := b.tenantBrowser(t, "Globex", b.free)
	if r := br2.post("/dashboard/plan", url.Values{"csrf": {tok2}, "plan": {gold}}); r.status != http.StatusSeeOther {
		t.Fatalf("another tenant's attempt: %d, want 303", r.status)
	}
}

// With a live subscription the button opens Stripe's portal to confirm the
// change of the subscription's price.
func TestDashboardPlanChangeWithASubscriptionGoesToThePortal(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	b := setup(t, setupOpts{stripeBase: rec.URL})
	gold, _ := b.OfferPlans(t)
	tn := b.tenant(t, "Subscribed Co", b.free)
	sub := "sub_" + uniq("dash")
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status)
		VALUES ($1, $2, $3, 'price_base', 'si_base', 'active')`, sub, tn.ID, "cus_"+uniq("dash")); err != nil {
		t.Fatal(err)
	}
	br := b.browser(t)
	wantRedirect(t, br.loginKey(b.key(t, tn.ID).Key), "/dashboard", "login")
	page := br.get("/dashboard")
	if !strings.Contains(page.body, "the change and what it costs") {
		t.Fatal("a subscribed tenant must be told it confirms the change on Stripe")
	}
	r := br.post("/dashboard/plan", url.Values{"csrf": {csrf(t, page.body)}, "plan": {gold}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") == "" {
		t.Fatalf("portal: %d %q", r.status, r.header.Get("Location"))
	}
	ps := rec.Posts("/v1/billing_portal/sessions")
	if len(ps) != 1 || ps[0].Form.Get("flow_data[subscription_update_confirm][subscription]") != sub ||
		ps[0].Form.Get("flow_data[subscription_update_confirm][items][0][price]") != "price_"+gold {
		t.Fatalf("portal sessions %+v", ps)
	}
	if len(rec.Posts("/v1/checkout/sessions")) != 0 || b.PlanOf(t, tn.ID) != b.free {
		t.Fatal("a subscribed tenant got a Checkout, or the plan changed before Stripe confirmed")
	}
}
