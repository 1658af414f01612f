package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

var purchaseSeq int

// purchaseIDs are a session, its invoice and its payment intent no other
// test uses.
func purchaseIDs() (cs, in, pi string) {
	purchaseSeq++
	n := fmt.Sprintf("%d%d", time.Now().UnixNano(), purchaseSeq)
	return "cs_test_" + n, "in_test_" + n, "pi_test_" + n
}

// topupSession is a paid payment-mode checkout.session.completed (the real
// capture, ids ours) for customer; meta is its metadata.
func topupSession(t *testing.T, typ, cs, in, pi, customer string, meta map[string]any) []byte {
	t.Helper()
	b := fixture(t, "real/checkout.session.completed.payment-mode.json", newEventID(t), time.Now(), func(o map[string]any) {
		o["id"], o["customer"], o["invoice"], o["payment_intent"] = cs, customer, nilIfEmpty(in), nilIfEmpty(pi)
		o["metadata"] = meta
	})
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	ev["type"] = typ
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// topupInvoice is a paid invoice (the real capture, no subscription) with
// one line of price × quantity.
func topupInvoice(t *testing.T, in, pi, customer, price string, quantity int64) []byte {
	t.Helper()
	return fixture(t, "real/invoice.paid.json", newEventID(t), time.Now(), func(o map[string]any) {
		o["id"], o["customer"], o["payment_intent"], o["subscription"] = in, customer, nilIfEmpty(pi), nil
		o["billing_reason"] = "manual"
		lines := o["lines"].(map[string]any)
		line := lines["data"].([]any)[0].(map[string]any)
		line["type"], line["quantity"], line["subscription"], line["subscription_item"] = "invoiceitem", quantity, nil, nil
		line["price"].(map[string]any)["id"] = price
		lines["data"] = []any{line}
	})
}

func (e *env) topups(tenant string) []credits.Grant {
	e.t.Helper()
	l, err := e.creds.List(context.Background(), tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []credits.Grant
	for _, g := range l {
		if g.Source == credits.SourceTopup {
			out = append(out, g)
		}
	}
	return out
}

func (e *env) mapTopup(price string, amount int64, expiresIn string) {
	e.t.Helper()
	in := credits.TopupInput{Meter: "requests", Amount: &amount}
	if expiresIn != "" {
		in.ExpiresIn = &expiresIn
	}
	if _, _, err := e.creds.PutTopup(context.Background(), price, in); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) postOK(body []byte) string {
	e.t.Helper()
	var ev struct{ ID string }
	if r := e.post(body); r.Status != 200 {
		e.t.Fatalf("webhook: %d %s", r.Status, r.Raw)
	}
	_ = json.Unmarshal(body, &ev)
	return ev.ID
}

// A signed checkout.session.completed in payment mode naming a mapped
// price (in its metadata, as a session Tollgate creates does) grants
// quantity × amount once; the invoice.paid of the invoice it created, its
// replays and the session's replays grant nothing more, in either order.
func TestTopupCheckoutAndItsInvoiceGrantOnce(t *testing.T) {
	e := newEnv(t, envOpts{credits: true})
	e.plans()
	cus := newCustomer()
	tn := e.tenant("free", cus)
	price := "price_topup_" + cus
	e.mapTopup(price, 10000, "720h")
	meta := map[string]any{billing.MetaTopupPrice: price, billing.MetaTopupQuantity: "2"}

	// Session first, then its invoice, then replays (new event ids).
	cs, in, pi := purchaseIDs()
	for _, body := range [][]byte{
		topupSession(t, "checkout.session.completed", cs, in, pi, cus, meta),
		topupInvoice(t, in, pi, cus, price, 2),
		topupSession(t, "checkout.session.completed", cs, in, pi, cus, meta),
		topupInvoice(t, in, pi, cus, price, 2),
	} {
		id := e.postOK(body)
		if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
			t.Fatalf("event %s: %+v %s", id, r, deref(r.Reason))
		}
	}
	g := e.topups(tn)
	if len(g) != 1 || g[0].Amount != 20000 || g[0].Meter != "requests" || g[0].ExpiresAt == nil ||
		g[0].ExpiresAt.Sub(g[0].EffectiveAt) != 720*time.Hour {
		t.Fatalf("after the session and its invoice: %+v", g)
	}

	// Invoice first (linked by the payment intent only), then the session.
	cs2, in2, pi2 := purchaseIDs()
	for _, body := range [][]byte{topupInvoice(t, in2, pi2, cus, price, 1), topupSession(t, "checkout.session.completed", cs2, "", pi2, cus, meta)} {
		id := e.postOK(body)
		if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
			t.Fatalf("event %s: %+v %s", id, r, deref(r.Reason))
		}
	}
	if g := e.topups(tn); len(g) != 2 {
		t.Fatalf("after the second purchase: %d top-up grants, want 2: %+v", len(g), g)
	}

	// Not paid yet: nothing until checkout.session.async_payment_succeeded.
	cs3, _, pi3 := purchaseIDs()
	unpaid := strings.Replace(string(topupSession(t, "checkout.session.completed", cs3, "", pi3, cus, meta)), `"payment_status":"paid"`, `"payment_status":"unpaid"`, 1)
	if r := e.waitEvent(e.postOK([]byte(unpaid))); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "async_payment_succeeded") {
		t.Fatalf("unpaid session: %+v %s", r, deref(r.Reason))
	}
	if r := e.waitEvent(e.postOK(topupSession(t, "checkout.session.async_payment_succeeded", cs3, "", pi3, cus, meta))); r.Status != billing.StatusProcessed {
		t.Fatalf("async payment succeeded: %+v %s", r, deref(r.Reason))
	}
	if g := e.topups(tn); len(g) != 3 {
		t.Fatalf("after the async payment: %d top-up grants, want 3", len(g))
	}

	// A payment of a price mapped to nothing is ignored, naming it.
	cs4, _, pi4 := purchaseIDs()
	other := map[string]any{billing.MetaTopupPrice: "price_not_mapped", billing.MetaTopupQuantity: "1"}
	if r := e.waitEvent(e.postOK(topupSession(t, "checkout.session.completed", cs4, "", pi4, cus, other))); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "price_not_mapped") {
		t.Fatalf("unmapped price: %+v %s", r, deref(r.Reason))
	}
}

// Without a secret key a session's line items cannot be read: the session
// is ignored saying so, and its invoice.paid (which carries its lines)
// grants the purchase; the session replayed then grants nothing.
func TestTopupWithoutKeyIsGrantedFromTheInvoice(t *testing.T) {
	e := newEnv(t, envOpts{credits: true})
	e.plans()
	cus := newCustomer()
	tn := e.tenant("free", cus)
	price := "price_topup_" + cus
	e.mapTopup(price, 500, "")
	cs, in, pi := purchaseIDs()
	r := e.waitEvent(e.postOK(topupSession(t, "checkout.session.completed", cs, in, pi, cus, map[string]any{})))
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "STRIPE_SECRET_KEY") {
		t.Fatalf("session without key: %+v %s", r, deref(r.Reason))
	}
	if r := e.waitEvent(e.postOK(topupInvoice(t, in, pi, cus, price, 3))); r.Status != billing.StatusProcessed {
		t.Fatalf("invoice: %+v %s", r, deref(r.Reason))
	}
	if g := e.topups(tn); len(g) != 1 || g[0].Amount != 1500 || g[0].ExpiresAt != nil {
		t.Fatalf("grants: %+v", g)
	}
	// An invoice of an unknown customer waits for the link (as other
	// events do); one of no mapped price and no subscription is ignored.
	if r := e.waitEvent(e.postOK(topupInvoice(t, "in_other_"+cus, "", newCustomer(), price, 1))); r.Status != billing.StatusIgnored || !strings.HasPrefix(deref(r.Reason), "invoice") || !strings.Contains(deref(r.Reason), "unknown customer") {
		t.Fatalf("unknown customer: %+v %s", r, deref(r.Reason))
	}
}

// With a secret key the session's line items are read from Stripe
// (GET /v1/checkout/sessions/{id}/line_items through stripe-go, here
// stripe-mock), and their price and quantity make the grant.
func TestTopupLineItemsAreReadFromStripe(t *testing.T) {
	base := stripemock.Start(t)
	e := newEnv(t, envOpts{credits: true, stripeBase: base})
	e.plans()
	cus := newCustomer()
	tn := e.tenant("free", cus)
	// stripe-mock answers every session with the same canned line item:
	// map its price.
	sc := &stripe.CheckoutSessionListLineItemsParams{Session: stripe.String("cs_any")}
	it := client.New("sk_test_123", &stripe.Backends{API: stripe.GetBackendWithConfig(stripe.APIBackend,
		&stripe.BackendConfig{URL: stripe.String(base), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})}).CheckoutSessions.ListLineItems(sc)
	if !it.Next() {
		t.Fatalf("stripe-mock lists no line item: %v", it.Err())
	}
	li := it.LineItem()
	e.mapTopup(li.Price.ID, 7, "24h")
	cs, _, pi := purchaseIDs()
	r := e.waitEvent(e.postOK(topupSession(t, "checkout.session.completed", cs, "", pi, cus, map[string]any{})))
	if r.Status != billing.StatusProcessed {
		t.Fatalf("session: %+v %s", r, deref(r.Reason))
	}
	g := e.topups(tn)
	if len(g) != 1 || g[0].Amount != 7*li.Quantity || !strings.Contains(g[0].Reason, li.Price.ID) {
		t.Fatalf("grants: %+v (line item %s × %d)", g, li.Price.ID, li.Quantity)
	}
}

// A guest checkout (no customer) names its tenant in client_reference_id,
// by id or by external id, and is granted to it without linking anything.
func TestTopupGuestCheckoutNamesItsTenant(t *testing.T) {
	e := newEnv(t, envOpts{credits: true})
	e.plans()
	ext := "acct-" + newCustomer()
	tn, err := e.ents.CreateTenant(context.Background(), entitlements.TenantInput{Name: "guest " + ext, Plan: "free", ExternalID: ext})
	if err != nil {
		t.Fatal(err)
	}
	price := "price_topup_" + ext
	e.mapTopup(price, 40, "")
	meta := map[string]any{billing.MetaTopupPrice: price, billing.MetaTopupQuantity: "1"}
	for _, ref := range []string{tn.ID, ext} {
		cs, _, pi := purchaseIDs()
		body := topupSession(t, "checkout.session.completed", cs, "", pi, "", meta)
		var ev map[string]any
		_ = json.Unmarshal(body, &ev)
		ev["data"].(map[string]any)["object"].(map[string]any)["client_reference_id"] = ref
		body, _ = json.Marshal(ev)
		if r := e.waitEvent(e.postOK(body)); r.Status != billing.StatusProcessed {
			t.Fatalf("guest checkout naming %q: %+v %s", ref, r, deref(r.Reason))
		}
	}
	if g := e.topups(tn.ID); len(g) != 2 {
		t.Fatalf("guest top-ups: %+v", g)
	}
}
