package billing_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// newestVersion is the shape the newest events come in.
const newestVersion = "2026-09-30.endive"

// startedAt sets a subscription's start_date and created (fixtures carry
// placeholders): the live plan subscription that started last carries the
// plan.
func startedAt(at time.Time) func(o map[string]any) {
	return func(o map[string]any) { o["start_date"], o["created"] = at.Unix(), at.Unix() }
}

// addonOnly makes the subscription's one item the add-on price.
func addonOnly(addon string, qty int, start time.Time) func(o map[string]any) {
	return func(o map[string]any) {
		startedAt(start)(o)
		it := o["items"].(map[string]any)["data"].([]any)[0].(map[string]any)
		it["price"].(map[string]any)["id"] = addon
		it["quantity"] = qty
	}
}

// postAll posts each body (signed now) and waits until it leaves pending.
func (e *env) postAll(bodies [][]byte) {
	e.t.Helper()
	for _, b := range bodies {
		if r := e.post(b); r.Status != http.StatusOK {
			e.t.Fatalf("post: %d %s", r.Status, r.Raw)
		}
		e.waitEvent(eventID(b))
	}
}

// settled waits until no event of the customer is pending (events that ran
// early are queued again by a later one).
func (e *env) settled(customer string) {
	e.t.Helper()
	testkit.Eventually(e.t, 30*time.Second, "events of "+customer+" settle", func() bool {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events WHERE stripe_customer_id = $1 AND status = 'pending'`, customer).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		return n == 0
	})
}

// A re-subscribe runs beside the old subscription until its period ends,
// and an add-on is billed as its own subscription. Whatever order Stripe
// delivers the account's events in (with duplicates), and without a secret
// key to read Stripe's state, the tenant ends on Stripe's final state: the
// plan and seats of the subscription that started last, the add-on of the
// separate subscription, the old subscription shown as overlapping.
func TestTwoSubscriptionsConvergeInAnyDeliveryOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	addon := "price_ms_addon_" + strings.ToLower(newCustomer()[5:])
	if r := e.admin(http.MethodPut, "/admin/v1/addons/"+addon, []byte(`{"name":"Priority","features":["priority"]}`)); r.Status != http.StatusCreated {
		t.Fatalf("add-on: %d %s", r.Status, r.Raw)
	}
	rng := rand.New(rand.NewPCG(25, 1))
	for run := 0; run < 20; run++ {
		cus := newCustomer()
		tenant := e.tenant("free", cus)
		old, resub, extra := "sub_old_"+cus, "sub_new_"+cus, "sub_add_"+cus
		base := time.Now().Add(-4 * time.Minute).Truncate(time.Second)
		at := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
		s1, e1 := base.Add(-20*24*time.Hour), base.Add(-20*24*time.Hour).AddDate(0, 1, 0)
		s2, e2 := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
		ev := func(kind, typ, sub, price, status string, n int, start, end time.Time, mutate func(map[string]any), previous map[string]any) []byte {
			return versioned(t, kind, vev{version: newestVersion, typ: typ, id: newEventID(t), sub: sub, cus: cus, price: price, status: status,
				tenant: tenant, start: start, end: end, created: at(n), mutate: mutate, previous: previous})
		}
		seats3 := func(o map[string]any) {
			startedAt(s2)(o)
			o["items"].(map[string]any)["data"].([]any)[0].(map[string]any)["quantity"] = 3
		}
		cancelAtEnd := func(o map[string]any) { startedAt(s1)(o); o["cancel_at_period_end"] = true }
		seq := [][]byte{
			ev("subscription", "customer.subscription.created", old, "price_pro_test", "active", 0, s1, e1, startedAt(s1), nil),
			ev("invoice", "invoice.paid", old, "price_pro_test", "active", 1, s1, e1, nil, nil),
			ev("subscription", "customer.subscription.created", resub, "price_team_test", "active", 10, s2, e2, seats3, nil),
			ev("invoice", "invoice.paid", resub, "price_team_test", "active", 11, s2, e2, nil, nil),
			// The old subscription's late events: it runs to its period end.
			ev("subscription", "customer.subscription.updated", old, "price_pro_test", "active", 12, s1, e1, cancelAtEnd,
				map[string]any{"cancel_at_period_end": false}),
			ev("subscription", "customer.subscription.created", extra, addon, "active", 13, s2, e2, addonOnly(addon, 2, s2.Add(time.Minute)), nil),
		}
		order := rng.Perm(len(seq))
		var bodies [][]byte
		for _, i := range order {
			bodies = append(bodies, seq[i])
			if rng.IntN(3) == 0 { // Stripe delivers at least once
				bodies = append(bodies, seq[i])
			}
		}
		e.postAll(bodies)
		e.settled(cus)
		d, err := e.ents.GetTenant(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		if d.Plan != "team" || d.EffectivePlan != "team" || d.Subscription == nil || d.Subscription.ID != resub || d.Subscription.Seats != 3 ||
			!d.Entitlements.PeriodStart.Equal(s2) || !slices.Contains(d.Entitlements.Features, "priority") ||
			!slices.Equal(d.OverlappingSubscriptions, []string{old}) {
			sub := "<none>"
			if d.Subscription != nil {
				sub = d.Subscription.ID
			}
			t.Fatalf("run %d (order %v): plan %s effective %s subscription %s period %s features %v overlapping %v; want team on %s (3 seats, from %s), priority, %s overlapping",
				run, order, d.Plan, d.EffectivePlan, sub, d.Entitlements.PeriodStart, d.Entitlements.Features, d.OverlappingSubscriptions, resub, s2, old)
		}
		if st := e.sub(extra); st.Status != "active" {
			t.Fatalf("run %d: the add-on subscription was not stored: %+v", run, st)
		}
	}
}

// A plan on one subscription and an add-on billed on another: the add-on
// subscription is stored (not ignored), grants its quota × quantity and
// features, and cancelling it takes away the add-on only.
func TestAnAddonOnItsOwnSubscriptionIsGrantedAndLostAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	ctx := context.Background()
	suffix := strings.ToLower(newCustomer()[5:])
	lim := int64(1000)
	planPrice := "price_ms_plan_" + suffix
	planKey := "ms-" + suffix[:20]
	if _, err := e.cat.CreatePlan(ctx, catalogue.PlanInput{Key: planKey, StripePriceID: planPrice,
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &lim}}}); err != nil {
		t.Fatal(err)
	}
	addon := "price_ms_extra_" + suffix
	if r := e.admin(http.MethodPut, "/admin/v1/addons/"+addon, []byte(`{"name":"More","quotas":{"requests":250},"features":["bulk"]}`)); r.Status != http.StatusCreated {
		t.Fatalf("add-on: %d %s", r.Status, r.Raw)
	}
	cus := newCustomer()
	tenant := e.tenant("free", cus)
	plan, extra := "sub_plan_"+cus, "sub_extra_"+cus
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	p := vev{version: newestVersion, typ: "customer.subscription.created", id: newEventID(t), sub: plan, cus: cus, price: planPrice,
		status: "active", start: start, end: end, created: base, mutate: startedAt(start)}
	e.processed(versioned(t, "subscription", p))
	// The add-on is a later purchase with a yearly interval: its own
	// subscription, started after the plan's.
	a := vev{version: newestVersion, typ: "customer.subscription.created", id: newEventID(t), sub: extra, cus: cus, price: addon,
		status: "active", qty: 2, start: base, end: base.AddDate(1, 0, 0), created: base.Add(time.Second), mutate: startedAt(base)}
	e.processed(versioned(t, "subscription", a))
	snap := e.snapshot(tenant)
	if snap.Quotas["requests"].Limit != 1500 || !slices.Contains(snap.Features, "bulk") || snap.Plan != planKey {
		t.Fatalf("with the add-on subscription: %+v, want requests 1000+2×250 and feature bulk on the plan", snap)
	}
	if !snap.PeriodStart.Equal(start) {
		t.Fatalf("period %s comes from the add-on subscription, want the plan's %s", snap.PeriodStart, start)
	}
	a.typ, a.id, a.created, a.status = "customer.subscription.deleted", newEventID(t), base.Add(2*time.Second), "canceled"
	e.processed(versioned(t, "subscription", a))
	snap = e.snapshot(tenant)
	if snap.Quotas["requests"].Limit != 1000 || slices.Contains(snap.Features, "bulk") || snap.Status != "active" || snap.Plan != planKey {
		t.Fatalf("after cancelling the add-on subscription: %s %s %+v %v, want the plan alone, active", snap.Plan, snap.Status, snap.Quotas, snap.Features)
	}
	if ev, _ := e.svc.GetEvent(ctx, a.id); ev.Status != billing.StatusProcessed {
		t.Fatalf("the cancellation was %s", ev.Status)
	}
}

// eventID is a signed body's event id.
func eventID(body []byte) string {
	var ev struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &ev)
	return ev.ID
}

// An invoice.paid delivered before its subscription's first event is
// ignored as early, then runs again when the subscription is applied and
// ends processed: the past_due subscription it pays is active.
func TestAnEarlyInvoiceRunsAgainWhenItsSubscriptionArrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{grace: time.Hour})
	e.plans()
	cus := newCustomer()
	tenant := e.tenant("free", cus)
	sub := "sub_early_" + cus
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	p := vev{version: "2026-03-25.dahlia", sub: sub, cus: cus, price: "price_pro_test", status: "past_due", start: start, end: end, mutate: startedAt(start)}
	paid := versioned(t, "invoice", with(vevID(t, p), "invoice.paid", base.Add(time.Second)))
	if r := e.post(paid); r.Status != http.StatusOK {
		t.Fatalf("post: %d %s", r.Status, r.Raw)
	}
	first := e.waitEvent(eventID(paid))
	if first.Status != billing.StatusIgnored || !strings.Contains(deref(first.Reason), "unknown subscription "+sub) {
		t.Fatalf("early invoice: %s %s", first.Status, deref(first.Reason))
	}
	p.version = newestVersion
	e.processed(versioned(t, "subscription", with(vevID(t, p), "customer.subscription.created", base)))
	testkit.Eventually(t, 30*time.Second, "the early invoice runs again", func() bool {
		return e.event(eventID(paid)).Status == billing.StatusProcessed
	})
	if st := e.sub(sub); st.Status != "active" || st.GraceEndsAt != nil {
		t.Fatalf("after the early invoice ran: %+v, want active without grace", st)
	}
	if snap := e.snapshot(tenant); snap.Plan != "pro" || snap.Status != "active" {
		t.Fatalf("snapshot %s %s", snap.Plan, snap.Status)
	}
}

func vevID(t testing.TB, p vev) vev {
	p.id = newEventID(t)
	return p
}

// A plan sells through several prices (monthly and yearly) and a product
// (every price of it); an add-on the same. Subscriptions on any of them get
// the plan or the add-on; a price mapped twice is a 409 naming the price and
// what has it; stripe_price_id is still accepted as a one-element list.
func TestPlansAndAddonsMapSeveralPricesAndProducts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	sfx := strings.ToLower(newCustomer()[5:])
	monthly, yearly, product := "price_m_"+sfx, "price_y_"+sfx, "prod_p_"+sfx
	key := "multi-" + sfx[:16]
	r := e.admin(http.MethodPost, "/admin/v1/plans", []byte(`{"key":"`+key+`","stripe_price_ids":["`+monthly+`","`+yearly+`"],"stripe_product_id":"`+product+`",
		"quotas":{"requests":{"limit":100}}}`))
	if r.Status != http.StatusCreated || r.Body["stripe_price_id"] != monthly || !strings.Contains(r.Raw, `"stripe_price_ids":["`+monthly+`","`+yearly+`"]`) ||
		r.Body["stripe_product_id"] != product {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	legacyKey, legacy := "legacy-"+sfx[:16], "price_l_"+sfx
	if r := e.admin(http.MethodPost, "/admin/v1/plans", []byte(`{"key":"`+legacyKey+`","stripe_price_id":"`+legacy+`"}`)); r.Status != http.StatusCreated ||
		!strings.Contains(r.Raw, `"stripe_price_ids":["`+legacy+`"]`) {
		t.Fatalf("stripe_price_id as a one-element list: %d %s", r.Status, r.Raw)
	}
	// A price mapped twice: 409 naming the price and the plan that has it.
	for _, body := range []string{`{"key":"dup-` + sfx[:16] + `","stripe_price_ids":["price_other_` + sfx + `","` + yearly + `"]}`,
		`{"key":"dup-` + sfx[:16] + `","stripe_price_id":"` + yearly + `"}`} {
		if r := e.admin(http.MethodPost, "/admin/v1/plans", []byte(body)); r.Status != http.StatusConflict ||
			!strings.Contains(r.Raw, yearly+" is already mapped to plan "+key) {
			t.Fatalf("%s: %d %s, want 409 naming %s and plan %s", body, r.Status, r.Raw, yearly, key)
		}
	}
	if r := e.admin(http.MethodPatch, "/admin/v1/plans/"+legacyKey, []byte(`{"stripe_product_id":"`+product+`"}`)); r.Status != http.StatusConflict ||
		!strings.Contains(r.Raw, "product "+product+" is already mapped to plan "+key) {
		t.Fatalf("a product mapped twice: %d %s", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodPut, "/admin/v1/addons/price_a_"+sfx, []byte(`{"name":"x","features":["f"],"stripe_price_ids":["`+monthly+`"]}`)); r.Status != http.StatusConflict ||
		!strings.Contains(r.Raw, monthly+" is already mapped to plan "+key) {
		t.Fatalf("a plan's price on an add-on: %d %s", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodPost, "/admin/v1/plans", []byte(`{"key":"bad-`+sfx[:16]+`","stripe_price_ids":["ok","has space"]}`)); r.Status != http.StatusBadRequest ||
		!strings.Contains(r.Raw, "stripe_price_ids[1]") {
		t.Fatalf("a bad price id: %d %s", r.Status, r.Raw)
	}
	addonProduct := "prod_a_" + sfx
	if r := e.admin(http.MethodPut, "/admin/v1/addons/price_a_"+sfx, []byte(`{"name":"Extra","quotas":{"requests":50},"stripe_product_id":"`+addonProduct+`"}`)); r.Status != http.StatusCreated ||
		r.Body["stripe_product_id"] != addonProduct {
		t.Fatalf("add-on with a product: %d %s", r.Status, r.Raw)
	}

	// Subscriptions on the yearly price, and on a price the plan does not
	// list but whose (expanded) product it names, both get the plan; an
	// item of the add-on's product grants the add-on.
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i, item := range []map[string]any{
		{"id": yearly},
		{"id": "price_unlisted_" + sfx, "product": map[string]any{"id": product, "object": "product", "name": "Multi"}},
	} {
		cus := newCustomer()
		tenant := e.tenant("free", cus)
		sub := "sub_multi_" + cus
		p := vev{version: newestVersion, typ: "customer.subscription.created", id: newEventID(t), sub: sub, cus: cus, price: "placeholder", status: "active",
			start: base.Add(-time.Hour), end: base.Add(-time.Hour).AddDate(1, 0, 0), created: base,
			mutate: func(o map[string]any) {
				price := o["items"].(map[string]any)["data"].([]any)[0].(map[string]any)["price"].(map[string]any)
				for k, v := range item {
					price[k] = v
				}
			},
			extraItems: []map[string]any{{"id": "si_extra_" + sub, "object": "subscription_item", "quantity": 2,
				"price": map[string]any{"id": "price_extra_unlisted_" + sfx, "object": "price", "product": addonProduct}}}}
		e.processed(versioned(t, "subscription", p))
		if snap := e.snapshot(tenant); snap.Plan != key || snap.Quotas["requests"].Limit != 200 {
			t.Fatalf("item %d: plan %s requests %d, want %s with 100 + 2×50", i, snap.Plan, snap.Quotas["requests"].Limit, key)
		}
	}
	// price.updated of a price mapped only through its product is not
	// reported as unmapped.
	id := newEventID(t)
	e.processed(fixture(t, "real/price.updated.json", id, base, func(o map[string]any) {
		o["id"], o["product"] = "price_unlisted_"+sfx, product
	}))
}

// Since 2025-12-15.clover the customer portal may move the billing cycle
// anchor: a customer.subscription.updated with a new billing_cycle_anchor
// and the period it starts moves the tenant's quota window there at once.
func TestAPortalAnchorChangeMovesTheQuotaWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus := newCustomer()
	tenant := e.tenant("free", cus)
	sub := "sub_anchor_" + cus
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.AddDate(0, 0, -10), base.AddDate(0, 0, -10).AddDate(0, 1, 0)
	p := vev{version: "2025-09-30.clover", typ: "customer.subscription.created", id: newEventID(t), sub: sub, cus: cus, price: "price_pro_test",
		status: "active", start: start, end: end, created: base, mutate: startedAt(start)}
	e.processed(versioned(t, "subscription", p))
	if snap := e.snapshot(tenant); !snap.PeriodStart.Equal(start) {
		t.Fatalf("before: window from %s, want %s", snap.PeriodStart, start)
	}
	// The portal resets the anchor to now: a new period from it.
	anchor := base.Add(time.Second)
	up := p
	up.version, up.typ, up.id, up.created, up.start, up.end = newestVersion, "customer.subscription.updated", newEventID(t), base.Add(2*time.Second), anchor, anchor.AddDate(0, 1, 0)
	up.mutate = func(o map[string]any) { startedAt(start)(o); o["billing_cycle_anchor"] = anchor.Unix() }
	up.previous = map[string]any{"billing_cycle_anchor": start.Unix(), "items": map[string]any{"data": []any{map[string]any{"id": "si_" + sub,
		"current_period_start": start.Unix(), "current_period_end": end.Unix()}}}}
	e.processed(versioned(t, "subscription", up))
	snap := e.snapshot(tenant)
	if !snap.PeriodStart.Equal(anchor) || !snap.PeriodEnd.Equal(anchor.AddDate(0, 1, 0)) {
		t.Fatalf("after the anchor change: window [%s, %s), want from the new anchor %s", snap.PeriodStart, snap.PeriodEnd, anchor)
	}
}

// An admin's plan change through Stripe moves a yearly subscriber to the
// target plan's yearly price (not its monthly default): the price with the
// subscription's interval and currency, read from Stripe.
func TestAPlanChangeKeepsTheSubscriptionsInterval(t *testing.T) {
	t.Parallel()
	fs := newFakeStripe(t)
	e := newEnv(t, envOpts{stripeBase: fs.URL})
	e.plans()
	sfx := strings.ToLower(newCustomer()[5:])
	cheap, monthly, yearly := "price_cy_"+sfx, "price_bm_"+sfx, "price_by_"+sfx
	fs.setPrice(cheap, "year", "eur", 10000)
	fs.setPrice(monthly, "month", "eur", 2000)
	fs.setPrice(yearly, "year", "eur", 20000)
	from, to := "cy-"+sfx[:16], "big-"+sfx[:16]
	for key, prices := range map[string][]string{from: {cheap}, to: {monthly, yearly}} {
		if _, err := e.cat.CreatePlan(context.Background(), catalogue.PlanInput{Key: key, StripePriceIDs: prices}); err != nil {
			t.Fatal(err)
		}
	}
	cus := newCustomer()
	sub := "sub_iv_" + cus
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	fs.setSub(fakeSub(sub, cus, "active", base.Add(-time.Hour).Unix(), base.Add(-time.Hour).AddDate(1, 0, 0).Unix(), [3]any{"si_" + sub, cheap, 1}))
	e.processed(subEvent(t, "customer.subscription.created", newEventID(t), cus, sub, "active", cheap, base))
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"`+to+`"}`)); r.Status != http.StatusOK {
		t.Fatalf("plan change: %d %s", r.Status, r.Raw)
	}
	reqs := fs.postsTo("/v1/subscriptions/" + sub)
	if len(reqs) != 1 || reqs[0].Form.Get("items[0][price]") != yearly {
		t.Fatalf("Stripe was sent %+v, want the yearly price %s", reqs, yearly)
	}
}
