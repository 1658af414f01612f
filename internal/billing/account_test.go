package billing_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
)

// A real account's sequence on basil-shaped events, in the order Stripe
// tends to deliver them: Checkout signup (the subscription's created before
// the session's completed), an upgrade with an add-on, a failed renewal,
// cancellation, and a new Checkout with a new customer. Run without a
// secret key (fields read from the payloads) and with one (each event a
// notification; the fake Stripe holds what Stripe would have at that time).
func TestARealAccountsSequenceOnBasil(t *testing.T) {
	t.Parallel()
	t.Run("a second subscription, 20 shuffled orders without a key", testSecondSubscriptionShuffled)
	for _, withKey := range []bool{false, true} {
		name := "without a key"
		if withKey {
			name = "with a key"
		}
		t.Run(name, func(t *testing.T) {
			var fs *fakeStripe
			o := envOpts{grace: time.Hour}
			if withKey {
				fs = newFakeStripe(t)
				o.stripeBase = fs.URL
			}
			e := newEnv(t, o)
			e.plans()
			addon := "price_seq_addon_" + strings.ToLower(newCustomer()[4:])
			if r := e.admin(http.MethodPut, "/admin/v1/addons/"+addon, []byte(`{"name":"Priority","features":["priority"]}`)); r.Status != http.StatusCreated {
				t.Fatalf("add-on: %d %s", r.Status, r.Raw)
			}
			const v = "2025-03-31.basil"
			tenant := e.tenant("free", "")
			cus, sub := newCustomer(), "sub_seq_"+newCustomer()
			base := time.Now().Add(-5 * time.Minute).Truncate(time.Second)
			start, end := base.Add(-time.Minute), base.Add(-time.Minute).AddDate(0, 1, 0)
			at := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
			addonItem := map[string]any{"id": "si_addon_" + sub, "object": "subscription_item", "price": map[string]any{"id": addon},
				"quantity": 2, "current_period_start": start.Unix(), "current_period_end": end.Unix()}
			stripeHas := func(status, price string, withAddon bool, s, en time.Time) {
				if fs == nil {
					return
				}
				items := [][3]any{{"si_" + sub, price, 1}}
				if withAddon {
					items = append(items, [3]any{"si_addon_" + sub, addon, 2})
				}
				st := fakeSub(sub, cus, status, s.Unix(), en.Unix(), items...)
				st["latest_invoice"] = "in_" + sub
				fs.setSub(st)
			}
			post := func(kind string, p vev) billing.Event {
				t.Helper()
				if r := e.post(versioned(t, kind, p)); r.Status != http.StatusOK {
					t.Fatalf("%s %s: %d %s", p.typ, p.id, r.Status, r.Raw)
				}
				e.waitEvent(p.id)
				ev, err := e.svc.GetEvent(t.Context(), p.id)
				if err != nil {
					t.Fatal(err)
				}
				return ev
			}
			p := vev{version: v, sub: sub, cus: cus, price: "price_pro_test", status: "active", tenant: tenant, start: start, end: end}

			// 1. Checkout signup: the subscription event comes first and waits
			// for the link; the completed session links and it runs again.
			stripeHas("active", "price_pro_test", false, start, end)
			p.typ, p.id, p.created = "customer.subscription.created", newEventID(t), at(0)
			created := p.id
			if ev := post("subscription", p); ev.Status != billing.StatusIgnored || !strings.Contains(deref(ev.IgnoredReason), "unknown customer") {
				t.Fatalf("subscription before checkout: %s %s", ev.Status, deref(ev.IgnoredReason))
			}
			p.typ, p.id, p.created = "checkout.session.completed", newEventID(t), at(1)
			post("checkout.session.completed", p)
			e.waitEvent(created)
			if snap := e.snapshot(tenant); snap.Plan != "pro" || snap.Status != "active" || !snap.PeriodStart.Equal(start) {
				t.Fatalf("after signup: %s %s %s", snap.Plan, snap.Status, snap.PeriodStart)
			}
			p.typ, p.id, p.created = "invoice.paid", newEventID(t), at(2)
			post("invoice", p)

			// 2. Upgrade to team with the add-on (two seats of it).
			stripeHas("active", "price_team_test", true, start, end)
			up := p
			up.typ, up.id, up.created, up.price = "customer.subscription.updated", newEventID(t), at(10), "price_team_test"
			up.extraItems = []map[string]any{addonItem}
			up.previous = map[string]any{"items": map[string]any{"data": []any{map[string]any{"id": "si_" + sub, "price": map[string]any{"id": "price_pro_test"},
				"quantity": 1, "current_period_start": start.Unix(), "current_period_end": end.Unix()}}}}
			post("subscription", up)
			if snap := e.snapshot(tenant); snap.Plan != "team" || !slices.Contains(snap.Features, "priority") {
				t.Fatalf("after the upgrade: %s %v", snap.Plan, snap.Features)
			}

			// 3. The renewal fails: the new period starts, payment fails
			// (status unchanged), Stripe turns it past_due (grace), fails again.
			next, nextEnd := end, end.AddDate(0, 1, 0)
			ren := up
			ren.typ, ren.id, ren.created, ren.start, ren.end, ren.previous = "invoice.created", newEventID(t), at(20), next, nextEnd, nil
			stripeHas("active", "price_team_test", true, next, nextEnd)
			post("invoice", ren)
			fail := ren
			fail.typ, fail.id, fail.created, fail.attempts = "invoice.payment_failed", newEventID(t), at(21), 1
			post("invoice", fail)
			if st := e.sub(sub); st.Status != "active" || st.Attempts != 1 || !st.PeriodStart.Equal(next) {
				t.Fatalf("after the failed payment: %+v, want active, 1 attempt, period from %s", st, next)
			}
			stripeHas("past_due", "price_team_test", true, next, nextEnd)
			pd := up
			pd.typ, pd.id, pd.created, pd.status, pd.start, pd.end = "customer.subscription.updated", newEventID(t), at(22), "past_due", next, nextEnd
			pd.previous = map[string]any{"status": "active"}
			pd.extraItems = []map[string]any{{"id": "si_addon_" + sub, "object": "subscription_item", "price": map[string]any{"id": addon},
				"quantity": 2, "current_period_start": next.Unix(), "current_period_end": nextEnd.Unix()}}
			post("subscription", pd)
			if snap := e.snapshot(tenant); snap.Plan != "team" || snap.Status != "past_due" || !slices.Contains(snap.Features, "priority") {
				t.Fatalf("in grace: %s %s %v", snap.Plan, snap.Status, snap.Features)
			}
			fail2 := fail
			fail2.id, fail2.created, fail2.attempts = newEventID(t), at(23), 2
			post("invoice", fail2)

			// 4. Cancellation: back to the default plan, the add-on gone.
			stripeHas("canceled", "price_team_test", true, next, nextEnd)
			del := pd
			del.typ, del.id, del.created, del.status, del.previous = "customer.subscription.deleted", newEventID(t), at(30), "canceled", nil
			post("subscription", del)
			if snap := e.snapshot(tenant); snap.Plan != "free" || snap.Status != "canceled" || slices.Contains(snap.Features, "priority") {
				t.Fatalf("after cancellation: %s %s %v", snap.Plan, snap.Status, snap.Features)
			}

			// 5. A new Checkout with a new customer: linked, and its
			// subscription applies.
			cus2, sub2 := newCustomer(), "sub_seq2_"+newCustomer()
			q := vev{version: v, sub: sub2, cus: cus2, price: "price_pro_test", status: "active", tenant: tenant, start: at(40), end: at(40).AddDate(0, 1, 0)}
			if fs != nil {
				fs.setSub(fakeSub(sub2, cus2, "active", q.start.Unix(), q.end.Unix(), [3]any{"si_" + sub2, "price_pro_test", 1}))
			}
			q.typ, q.id, q.created = "checkout.session.completed", newEventID(t), at(40)
			if ev := post("checkout.session.completed", q); ev.Status != billing.StatusProcessed {
				t.Fatalf("new checkout: %s %s", ev.Status, deref(ev.IgnoredReason))
			}
			q.typ, q.id, q.created = "customer.subscription.created", newEventID(t), at(41)
			post("subscription", q)
			if snap := e.snapshot(tenant); snap.Plan != "pro" || snap.Status != "active" {
				t.Fatalf("after the new checkout: %s %s", snap.Plan, snap.Status)
			}
			if c := e.admin(http.MethodGet, "/admin/v1/tenants/"+tenant, nil).Body["stripe_customer_id"]; c != cus2 {
				t.Fatalf("customer %v, want the new %s", c, cus2)
			}
			// Nothing failed along the way.
			if r := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=failed", nil); strings.Contains(r.Raw, sub) {
				t.Fatalf("failed events: %s", r.Raw)
			}
		})
	}
}

// The same account, sold the way SaaS companies sell: after the failed
// renewal the customer re-subscribes by a new Checkout (pro) while the old
// subscription (team with an add-on item) runs past_due to its period end,
// and buys a second add-on billed as its own subscription. Delivered in 20
// shuffled orders with duplicates and without a secret key, every run ends
// on Stripe's final state: the new subscription's plan, both add-ons (the
// old subscription is live until its period ends), the old one shown as
// overlapping.
func testSecondSubscriptionShuffled(t *testing.T) {
	e := newEnv(t, envOpts{grace: time.Hour})
	e.plans()
	suffix := strings.ToLower(newCustomer()[4:])
	addon, bulk := "price_seq_addon_"+suffix, "price_seq_bulk_"+suffix
	for price, body := range map[string]string{addon: `{"name":"Priority","features":["priority"]}`, bulk: `{"name":"Bulk","features":["bulk"]}`} {
		if r := e.admin(http.MethodPut, "/admin/v1/addons/"+price, []byte(body)); r.Status != http.StatusCreated {
			t.Fatalf("add-on: %d %s", r.Status, r.Raw)
		}
	}
	const v = "2025-03-31.basil"
	rng := rand.New(rand.NewPCG(25, 2))
	for run := 0; run < 20; run++ {
		tenant := e.tenant("free", "")
		cus := newCustomer()
		sub, sub2, sub3 := "sub_seq_"+cus, "sub_seq_re_"+cus, "sub_seq_bulk_"+cus
		base := time.Now().Add(-4 * time.Minute).Truncate(time.Second)
		start, end := base.Add(-time.Minute), base.Add(-time.Minute).AddDate(0, 1, 0)
		next, nextEnd := end, end.AddDate(0, 1, 0)
		at := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
		addonItem := func(s, en time.Time) []map[string]any {
			return []map[string]any{{"id": "si_addon_" + sub, "object": "subscription_item", "price": map[string]any{"id": addon},
				"quantity": 2, "current_period_start": s.Unix(), "current_period_end": en.Unix()}}
		}
		var seq [][]byte
		add := func(kind string, p vev) {
			p.id = newEventID(t)
			seq = append(seq, versioned(t, kind, p))
		}
		p := vev{version: v, sub: sub, cus: cus, price: "price_pro_test", status: "active", tenant: tenant, start: start, end: end, mutate: startedAt(start)}
		// The first subscription, as in the sequence above.
		add("subscription", with(p, "customer.subscription.created", at(0)))
		add("checkout.session.completed", with(p, "checkout.session.completed", at(1)))
		add("invoice", with(p, "invoice.paid", at(2)))
		up := p
		up.price, up.extraItems = "price_team_test", addonItem(start, end)
		add("subscription", with(up, "customer.subscription.updated", at(10)))
		ren := up
		ren.start, ren.end = next, nextEnd
		add("invoice", with(ren, "invoice.created", at(20)))
		fail := ren
		fail.attempts = 1
		add("invoice", with(fail, "invoice.payment_failed", at(21)))
		pd := ren
		pd.status, pd.extraItems, pd.previous = "past_due", addonItem(next, nextEnd), map[string]any{"status": "active"}
		add("subscription", with(pd, "customer.subscription.updated", at(22)))
		fail.attempts = 2
		add("invoice", with(fail, "invoice.payment_failed", at(23)))
		// The re-subscribe: a new Checkout of the same customer, while the
		// old subscription is set to end with its period.
		re := vev{version: v, sub: sub2, cus: cus, price: "price_pro_test", status: "active", tenant: tenant, start: at(30), end: at(30).AddDate(0, 1, 0),
			mutate: startedAt(at(30))}
		add("checkout.session.completed", with(re, "checkout.session.completed", at(30)))
		add("subscription", with(re, "customer.subscription.created", at(31)))
		add("invoice", with(re, "invoice.paid", at(32)))
		late := pd
		late.previous = map[string]any{"cancel_at_period_end": false}
		late.mutate = func(o map[string]any) { startedAt(start)(o); o["cancel_at_period_end"] = true }
		add("subscription", with(late, "customer.subscription.updated", at(33)))
		// A second add-on, billed on its own (yearly).
		ex := vev{version: v, sub: sub3, cus: cus, price: bulk, status: "active", tenant: tenant, start: at(34), end: at(34).AddDate(1, 0, 0),
			mutate: startedAt(at(34))}
		add("subscription", with(ex, "customer.subscription.created", at(34)))

		order := rng.Perm(len(seq))
		for _, i := range order {
			e.postAll([][]byte{seq[i]})
			if rng.IntN(4) == 0 {
				e.postAll([][]byte{seq[i]})
			}
		}
		e.settled(cus)
		d, err := e.ents.GetTenant(context.Background(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		cur := "<none>"
		if d.Subscription != nil {
			cur = d.Subscription.ID
		}
		if d.StripeCustomerID != cus || d.Plan != "pro" || d.EffectivePlan != "pro" || d.Status != "active" || cur != sub2 ||
			!slices.Contains(d.Entitlements.Features, "priority") || !slices.Contains(d.Entitlements.Features, "bulk") ||
			!slices.Equal(d.OverlappingSubscriptions, []string{sub}) {
			t.Fatalf("run %d (order %v): plan %s effective %s status %s subscription %s features %v overlapping %v; want pro on %s, priority and bulk, %s overlapping",
				run, order, d.Plan, d.EffectivePlan, d.Status, cur, d.Entitlements.Features, d.OverlappingSubscriptions, sub2, sub)
		}
		if r := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=failed", nil); strings.Contains(r.Raw, cus) {
			t.Fatalf("run %d: failed events: %s", run, r.Raw)
		}
	}
}

// with is p as an event of type typ created at.
func with(p vev, typ string, created time.Time) vev {
	p.typ, p.created = typ, created
	return p
}
