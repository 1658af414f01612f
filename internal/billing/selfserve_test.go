package billing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

var upgradeURLs = billing.UpgradeURLs{Success: "https://tollgate.example/dashboard?upgrade=done", Cancel: "https://tollgate.example/dashboard?upgrade=canceled"}

// A tenant without a subscription or a Stripe customer: the customer is
// created in Stripe and linked, then a Checkout Session for the plan's
// price is opened; the plan itself only changes when Stripe's webhooks say
// the Checkout was completed.
func TestSelfServeCheckoutCreatesTheCustomerAndGrantsNothingBeforeStripe(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	e := newEnv(t, envOpts{stripeBase: rec.URL, noWorker: true})
	e.plans()
	tenant := e.tenant("free", "")
	v0 := e.version(tenant)

	up, err := e.svc.StartUpgrade(context.Background(), tenant, "pro", upgradeURLs)
	if err != nil {
		t.Fatal(err)
	}
	if up.Kind != billing.UpgradeCheckout || !strings.HasPrefix(up.URL, "https://checkout.stripe.com/") || !strings.HasPrefix(up.SessionID, "cs_") {
		t.Fatalf("upgrade %+v, want a Checkout Session", up)
	}
	customers := rec.Posts("/v1/customers")
	if len(customers) != 1 || customers[0].Form.Get("metadata[tenant_id]") != tenant || customers[0].Form.Get("name") != "t-" ||
		customers[0].IdempotencyKey == "" {
		t.Fatalf("customer creation %+v", customers)
	}
	cus := e.customerOf(tenant)
	if !strings.HasPrefix(cus, "cus_") {
		t.Fatalf("tenant linked to %q, want the customer Stripe created", cus)
	}
	sessions := rec.Posts("/v1/checkout/sessions")
	if len(sessions) != 1 {
		t.Fatalf("%d checkout sessions, want 1", len(sessions))
	}
	want := map[string]string{
		"mode": "subscription", "customer": cus, "client_reference_id": tenant,
		"line_items[0][price]": "price_pro_test", "line_items[0][quantity]": "1",
		"success_url": upgradeURLs.Success, "cancel_url": upgradeURLs.Cancel,
		"subscription_data[metadata][tenant_id]": tenant, "metadata[tenant_id]": tenant, "metadata[plan]": "pro",
	}
	for k, v := range want {
		if got := sessions[0].Form.Get(k); got != v {
			t.Errorf("checkout %s = %q, want %q", k, got, v)
		}
	}
	if e.tenantPlan(tenant) != "free" || e.version(tenant) != v0+1 {
		t.Fatalf("after starting Checkout: plan %s version %d, want free and only the link's version %d", e.tenantPlan(tenant), e.version(tenant), v0+1)
	}

	// A second click reuses the linked customer.
	if _, err := e.svc.StartUpgrade(context.Background(), tenant, "team", upgradeURLs); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Posts("/v1/customers")); n != 1 {
		t.Fatalf("%d customers created, want 1", n)
	}
	if s := rec.Posts("/v1/checkout/sessions"); len(s) != 2 || s[1].Form.Get("customer") != cus || s[1].Form.Get("line_items[0][price]") != "price_team_test" {
		t.Fatalf("second session %+v", s)
	}

	// Stripe confirms: the completed session (the checkout.session of
	// Stripe's OpenAPI fixtures, as completed) and the subscription it
	// made, processed by a worker as Stripe sends them.
	hooks := newEnvOn(t, e.pool, e.rdb, e.prefix, envOpts{})
	sub := "sub_ss_" + newCustomer()
	co := newEventID(t)
	hooks.post(fixture(t, "spec/checkout.session.completed.json", co, time.Now(), func(o map[string]any) {
		o["id"], o["customer"], o["subscription"], o["client_reference_id"] = up.SessionID, cus, sub, tenant
		o["metadata"] = map[string]any{"tenant_id": tenant, "plan": "pro"}
	}))
	if r := hooks.waitEvent(co); r.Status != billing.StatusProcessed {
		t.Fatalf("checkout completed: %+v %s", r, deref(r.Reason))
	}
	created := newEventID(t)
	hooks.post(subEvent(t, "customer.subscription.created", created, cus, sub, "active", "price_pro_test", time.Now()))
	if r := hooks.waitEvent(created); r.Status != billing.StatusProcessed {
		t.Fatalf("subscription created: %+v %s", r, deref(r.Reason))
	}
	if e.tenantPlan(tenant) != "pro" || e.snapshot(tenant).Plan != "pro" {
		t.Fatalf("after Stripe's webhooks: plan %s, want pro", e.tenantPlan(tenant))
	}
}

// With a live subscription the tenant goes to the customer portal's
// subscription_update_confirm flow for the plan item's new price; the plan
// changes only through the subscription.updated that follows.
func TestSelfServeWithASubscriptionOpensThePortalConfirmation(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	e := newEnv(t, envOpts{stripeBase: rec.URL, noWorker: true})
	e.plans()
	cus := newCustomer()
	tenant := e.tenant("pro", cus)
	sub := "sub_portal_" + newCustomer()
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status)
		VALUES ($1, $2, $3, 'price_pro_test', $4, 'active')`, sub, tenant, cus, "si_"+sub); err != nil {
		t.Fatal(err)
	}
	v0 := e.version(tenant)
	up, err := e.svc.StartUpgrade(context.Background(), tenant, "team", upgradeURLs)
	if err != nil {
		t.Fatal(err)
	}
	if up.Kind != billing.UpgradePortal || up.URL == "" || !strings.HasPrefix(up.SessionID, "bps_") {
		t.Fatalf("upgrade %+v, want a portal session", up)
	}
	ps := rec.Posts("/v1/billing_portal/sessions")
	if len(ps) != 1 {
		t.Fatalf("%d portal sessions, want 1", len(ps))
	}
	want := map[string]string{
		"customer": cus, "return_url": upgradeURLs.Cancel,
		"flow_data[type]": "subscription_update_confirm",
		"flow_data[subscription_update_confirm][subscription]":    sub,
		"flow_data[subscription_update_confirm][items][0][id]":    "si_" + sub,
		"flow_data[subscription_update_confirm][items][0][price]": "price_team_test",
		"flow_data[after_completion][type]":                       "redirect",
		"flow_data[after_completion][redirect][return_url]":       upgradeURLs.Success,
	}
	for k, v := range want {
		if got := ps[0].Form.Get(k); got != v {
			t.Errorf("portal %s = %q, want %q", k, got, v)
		}
	}
	if n := len(rec.Posts("/v1/checkout/sessions")) + len(rec.Posts("/v1/customers")) + len(rec.Posts("/v1/subscriptions/"+sub)); n != 0 {
		t.Fatalf("%d other Stripe calls, want none (no Checkout, no customer, no direct update)", n)
	}
	if e.tenantPlan(tenant) != "pro" || e.version(tenant) != v0 {
		t.Fatalf("opening the portal changed plan %s version %d→%d", e.tenantPlan(tenant), v0, e.version(tenant))
	}
	// The plan the subscription has already is not a change.
	if _, err := e.svc.StartUpgrade(context.Background(), tenant, "pro", upgradeURLs); apperr.CodeOf(err) != apperr.Invalid {
		t.Fatalf("upgrade to the current plan: %v, want Invalid", err)
	}
}

// Internal, unpriced and unknown plans are refused alike (a tenant learns
// nothing of internal plans), before any Stripe call.
func TestSelfServeRefusesPlansNotOffered(t *testing.T) {
	t.Parallel()
	rec := stripemock.NewRecorder(t, stripemock.Start(t))
	e := newEnv(t, envOpts{stripeBase: rec.URL, noWorker: true})
	e.plans()
	hidden := "staff_" + strings.ToLower(newCustomer()[5:15])
	if _, err := e.cat.CreatePlan(context.Background(), catalogue.PlanInput{Key: hidden, StripePriceID: "price_" + hidden, Public: ptrBool(false)}); err != nil {
		t.Fatal(err)
	}
	tenant := e.tenant("free", "")
	v0 := e.version(tenant)
	for _, plan := range []string{hidden, "free", "no-such-plan", "NOT A KEY", ""} {
		_, err := e.svc.StartUpgrade(context.Background(), tenant, plan, upgradeURLs)
		ae, ok := apperr.As(err)
		if !ok || ae.Code != apperr.Invalid || len(ae.Fields) != 1 || ae.Fields[0].Field != "plan" {
			t.Fatalf("plan %q: %v, want Invalid naming plan", plan, err)
		}
		if strings.Contains(err.Error(), "internal") || strings.Contains(err.Error(), "price") {
			t.Fatalf("plan %q: the refusal tells why (%v); it must read like an unknown plan", plan, err)
		}
	}
	if rec.Count() != 0 || e.version(tenant) != v0 || e.customerOf(tenant) != "" {
		t.Fatalf("refused upgrades reached Stripe %d times or changed the tenant", rec.Count())
	}
	if _, err := e.svc.StartUpgrade(context.Background(), "00000000-0000-0000-0000-000000000000", "pro", upgradeURLs); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown tenant: %v, want NotFound", err)
	}
}

// Stripe refusing or not answering is an Upstream error with Stripe's
// message, and changes nothing here.
func TestSelfServeStripeErrorsChangeNothing(t *testing.T) {
	t.Parallel()
	t.Run("stripe refuses the session", func(t *testing.T) {
		rec := stripemock.NewRecorder(t, stripemock.Start(t))
		rec.Refuse("/v1/checkout/sessions", "No such price: 'price_pro_test'")
		e := newEnv(t, envOpts{stripeBase: rec.URL, noWorker: true})
		e.plans()
		cus := newCustomer()
		tenant := e.tenant("free", cus)
		v0 := e.version(tenant)
		_, err := e.svc.StartUpgrade(context.Background(), tenant, "pro", upgradeURLs)
		if apperr.CodeOf(err) != apperr.Upstream || !strings.Contains(err.Error(), "No such price") {
			t.Fatalf("err %v, want Upstream with Stripe's message", err)
		}
		if e.version(tenant) != v0 || e.tenantPlan(tenant) != "free" {
			t.Fatal("a refused Checkout changed the tenant")
		}
	})
	t.Run("stripe-mock refuses reading the subscription", func(t *testing.T) {
		e := newEnv(t, envOpts{stripeBase: stripemock.Start(t), noWorker: true})
		e.plans()
		cus := newCustomer()
		tenant := e.tenant("pro", cus)
		// No item id stored, and an id stripe-mock answers 404 for.
		sub := "sub_gone/" + newCustomer()
		if _, err := e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, status)
			VALUES ($1, $2, $3, 'price_pro_test', 'active')`, sub, tenant, cus); err != nil {
			t.Fatal(err)
		}
		_, err := e.svc.StartUpgrade(context.Background(), tenant, "team", upgradeURLs)
		if apperr.CodeOf(err) != apperr.Upstream || !strings.Contains(err.Error(), "Stripe") {
			t.Fatalf("err %v, want Upstream", err)
		}
	})
	t.Run("stripe unreachable", func(t *testing.T) {
		e := newEnv(t, envOpts{stripeBase: stripemock.Unreachable(t), noWorker: true})
		e.plans()
		tenant := e.tenant("free", "")
		v0 := e.version(tenant)
		_, err := e.svc.StartUpgrade(context.Background(), tenant, "pro", upgradeURLs)
		if apperr.CodeOf(err) != apperr.Upstream || !strings.Contains(err.Error(), "could not be reached") {
			t.Fatalf("err %v, want Upstream saying Stripe could not be reached", err)
		}
		if e.version(tenant) != v0 || e.customerOf(tenant) != "" {
			t.Fatal("an unreachable Stripe changed the tenant")
		}
	})
}

func ptrBool(b bool) *bool { return &b }

// customerOf is the tenant's linked Stripe customer, or "".
func (e *env) customerOf(tenant string) string {
	e.t.Helper()
	var c *string
	if err := e.pool.QueryRow(context.Background(), `SELECT stripe_customer_id FROM tenants WHERE id = $1`, tenant).Scan(&c); err != nil {
		e.t.Fatal(err)
	}
	return deref0(c)
}

func deref0(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
