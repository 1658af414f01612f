package billing_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/jobs"
)

// subCancel reads cancel_at_period_end.
func (e *env) subCancel(id string) bool {
	e.t.Helper()
	var c bool
	if err := e.pool.QueryRow(context.Background(), `SELECT cancel_at_period_end FROM subscriptions WHERE id = $1`, id).Scan(&c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// Two updates of the same second delivered in reverse end on the newer
// state: without a key the older one is recognised through the newer one's
// previous_attributes; with a key both read the subscription from Stripe.
func TestSameSecondUpdatesInReverseEndOnTheNewerState(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, e *env, fs *fakeStripe) {
		cus, sub := newCustomer(), "sub_tie_"+newCustomer()
		tenant := e.tenant("free", cus)
		base := time.Now().Add(-time.Minute).Truncate(time.Second)
		start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
		p := vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_pro_test", status: "active", start: start, end: end}
		if fs != nil {
			fs.setSub(fakeSub(sub, cus, "active", start.Unix(), end.Unix(), [3]any{"si_" + sub, "price_pro_test", 1}))
		}
		p.typ, p.id, p.created = "customer.subscription.created", newEventID(t), base
		e.processed(versioned(t, "subscription", p))

		// Within one second: first the upgrade to team, then cancellation
		// at period end.
		tie := base.Add(time.Second)
		first := p
		first.typ, first.id, first.created, first.price = "customer.subscription.updated", newEventID(t), tie, "price_team_test"
		first.previous = map[string]any{"items": map[string]any{"data": []any{map[string]any{"id": "si_" + sub, "object": "subscription_item",
			"price": map[string]any{"id": "price_pro_test"}, "quantity": 1, "current_period_start": start.Unix(), "current_period_end": end.Unix()}}}}
		second := first
		second.id, second.previous = newEventID(t), map[string]any{"cancel_at_period_end": false}
		second.mutate = func(o map[string]any) { o["cancel_at_period_end"] = true }
		if fs != nil {
			s := fakeSub(sub, cus, "active", start.Unix(), end.Unix(), [3]any{"si_" + sub, "price_team_test", 1})
			s["cancel_at_period_end"] = true
			fs.setSub(s)
		}
		// Delivered in reverse.
		e.processed(versioned(t, "subscription", second))
		body := versioned(t, "subscription", first)
		e.post(body)
		r := e.waitEvent(first.id)
		if r.Status == billing.StatusFailed {
			t.Fatalf("older event: %+v %s", r, deref(r.LastErr))
		}
		if !e.subCancel(sub) || e.tenantPlan(tenant) != "team" {
			t.Fatalf("after reversed delivery: cancel_at_period_end %v plan %s, want true and team (the newer state); older event %s %s",
				e.subCancel(sub), e.tenantPlan(tenant), r.Status, deref(r.Reason))
		}
		if fs == nil && (r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "previous_attributes")) {
			t.Fatalf("older event: %s %s, want ignored as older through previous_attributes", r.Status, deref(r.Reason))
		}
	}
	t.Run("without a key", func(t *testing.T) {
		e := newEnv(t, envOpts{})
		e.plans()
		run(t, e, nil)
	})
	t.Run("with a key", func(t *testing.T) {
		fs := newFakeStripe(t)
		e := newEnv(t, envOpts{stripeBase: fs.URL})
		e.plans()
		run(t, e, fs)
	})
}

// With a secret key an event is a notification: what Stripe has now is
// applied, whatever the payload (of any version) said.
func TestWithAKeyTheSubscriptionReadFromStripeIsApplied(t *testing.T) {
	t.Parallel()
	fs := newFakeStripe(t)
	e := newEnv(t, envOpts{stripeBase: fs.URL})
	e.plans()
	cus, sub := newCustomer(), "sub_note_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	fs.setSub(fakeSub(sub, cus, "active", start.Unix(), end.Unix(), [3]any{"si_" + sub, "price_team_test", 1}))
	p := vev{version: "2025-09-30.clover", sub: sub, cus: cus, price: "price_pro_test", status: "incomplete", start: start, end: end,
		typ: "customer.subscription.created", id: newEventID(t), created: base}
	e.processed(versioned(t, "subscription", p))
	if snap := e.snapshot(tenant); snap.Plan != "team" || snap.Status != "active" || !snap.PeriodStart.Equal(start) {
		t.Fatalf("plan %s status %s period %s, want Stripe's team active %s", snap.Plan, snap.Status, snap.PeriodStart, start)
	}
	// An invoice event reads the subscription too: Stripe says past_due.
	s := fakeSub(sub, cus, "past_due", start.Unix(), end.Unix(), [3]any{"si_" + sub, "price_team_test", 1})
	fs.setSub(s)
	p.typ, p.id, p.created, p.attempts = "invoice.payment_failed", newEventID(t), base.Add(time.Second), 1
	e.processed(versioned(t, "invoice", p))
	if st := e.sub(sub); st.Status != "past_due" || st.Attempts != 1 {
		t.Fatalf("after payment_failed: %+v, want Stripe's past_due and 1 attempt", st)
	}
}

// The plan comes from the item whose price maps to a plan; other items
// (metered overage first) never block status changes; two plan items make
// the event failed with a reason an admin sees.
func TestThePlanItemDecidesAndOtherItemsNeverBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_items_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	overage := map[string]any{"id": "si_over_" + sub, "object": "subscription_item", "price": map[string]any{"id": "price_overage_metered",
		"recurring": map[string]any{"usage_type": "metered"}}, "current_period_start": start.Unix(), "current_period_end": end.Unix()}
	p := vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_pro_test", status: "active", start: start, end: end,
		typ: "customer.subscription.created", id: newEventID(t), created: base}
	p.mutate = func(o map[string]any) {
		items := o["items"].(map[string]any)
		items["data"] = append([]any{overage}, items["data"].([]any)...) // the overage item first
	}
	e.processed(versioned(t, "subscription", p))
	if snap := e.snapshot(tenant); snap.Plan != "pro" {
		t.Fatalf("plan %s, want pro from the second item", snap.Plan)
	}
	p.typ, p.id, p.created, p.status = "customer.subscription.updated", newEventID(t), base.Add(time.Second), "unpaid"
	e.processed(versioned(t, "subscription", p))
	if snap := e.snapshot(tenant); snap.Plan != "free" || snap.Status != "unpaid" {
		t.Fatalf("unpaid: plan %s status %s, want free unpaid", snap.Plan, snap.Status)
	}
	// Two items mapping to plans: failed, with the reason shown to admins.
	two := p
	two.typ, two.id, two.created, two.status = "customer.subscription.updated", newEventID(t), base.Add(2*time.Second), "active"
	two.extraItems = []map[string]any{{"id": "si_team_" + sub, "object": "subscription_item", "price": map[string]any{"id": "price_team_test"},
		"quantity": 1, "current_period_start": start.Unix(), "current_period_end": end.Unix()}}
	e.post(versioned(t, "subscription", two))
	r := e.waitEvent(two.id)
	if r.Status != billing.StatusFailed || !strings.Contains(deref(r.LastErr), "price_team_test") || !strings.Contains(deref(r.LastErr), "price_pro_test") {
		t.Fatalf("two plan items: %s %s, want failed naming both prices", r.Status, deref(r.LastErr))
	}
	got := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=failed", nil)
	if !strings.Contains(got.Raw, two.id) || !strings.Contains(got.Raw, "exactly one item may carry the plan") {
		t.Fatalf("failed list: %s", got.Raw)
	}
	if e.sub(sub).Status != "unpaid" {
		t.Fatalf("a failed event changed the subscription: %+v", e.sub(sub))
	}
}

// Churn: a deleted customer and a terminal subscription never link or
// re-link a tenant; the tenant's next Checkout with a new customer links
// and its subscription applies.
func TestChurnedTenantIsNeverRelinkedAndANewCheckoutLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	v := "2025-03-31.basil"
	old, sub := newCustomer(), "sub_churn_"+newCustomer()
	tenant := e.tenant("free", "")
	meta := func(o map[string]any) { o["metadata"] = map[string]any{"tenant_id": tenant} }
	p := vev{version: v, sub: sub, cus: old, price: "price_pro_test", status: "active", start: start, end: end, tenant: tenant, mutate: meta,
		typ: "customer.subscription.created", id: newEventID(t), created: base}
	e.processed(versioned(t, "subscription", p)) // links by metadata.tenant_id
	if e.tenantPlan(tenant) != "pro" {
		t.Fatalf("plan %s, want pro", e.tenantPlan(tenant))
	}
	del := newEventID(t)
	e.processed(fixture(t, "real/customer.deleted.json", del, base.Add(time.Second), func(o map[string]any) { o["id"] = old }))
	// Its late subscription.deleted, with metadata.tenant_id, links nothing.
	late := p
	late.typ, late.id, late.created, late.status = "customer.subscription.deleted", newEventID(t), base.Add(2*time.Second), "canceled"
	e.post(versioned(t, "subscription", late))
	e.waitEvent(late.id)
	customerOf := func() any {
		return e.admin(http.MethodGet, "/admin/v1/tenants/"+tenant, nil).Body["stripe_customer_id"]
	}
	if c := customerOf(); c != nil {
		t.Fatalf("tenant re-linked to %v after its customer was deleted", c)
	}
	// A late active update of the deleted customer does not link either.
	ghost := p
	ghost.typ, ghost.id, ghost.created = "customer.subscription.updated", newEventID(t), base.Add(3*time.Second)
	e.post(versioned(t, "subscription", ghost))
	if r := e.waitEvent(ghost.id); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "deleted") || customerOf() != nil {
		t.Fatalf("late update of the deleted customer: %s %s, customer %v", r.Status, deref(r.Reason), customerOf())
	}
	// A new Checkout with a new customer links, and its subscription applies.
	fresh, sub2 := newCustomer(), "sub_back_"+newCustomer()
	q := vev{version: v, sub: sub2, cus: fresh, price: "price_team_test", status: "active", start: start, end: end, tenant: tenant,
		typ: "checkout.session.completed", id: newEventID(t), created: base.Add(4 * time.Second)}
	e.processed(versioned(t, "checkout.session.completed", q))
	if c := customerOf(); c != fresh {
		t.Fatalf("new checkout: customer %v, want %s", c, fresh)
	}
	q.typ, q.id, q.created = "customer.subscription.created", newEventID(t), base.Add(5*time.Second)
	e.processed(versioned(t, "subscription", q))
	if snap := e.snapshot(tenant); snap.Plan != "team" || snap.Status != "active" {
		t.Fatalf("after the new subscription: %s %s", snap.Plan, snap.Status)
	}

	// A customer whose subscription ended (not deleted) is replaced by the
	// next Checkout's customer too; one with a live subscription is not.
	t2 := e.tenant("free", "")
	c1, s1 := newCustomer(), "sub_c1_"+newCustomer()
	a := vev{version: v, sub: s1, cus: c1, price: "price_pro_test", status: "active", start: start, end: end, tenant: t2,
		typ: "checkout.session.completed", id: newEventID(t), created: base}
	e.processed(versioned(t, "checkout.session.completed", a))
	a.typ, a.id = "customer.subscription.created", newEventID(t)
	e.processed(versioned(t, "subscription", a))
	c2 := newCustomer()
	b := vev{version: v, sub: "sub_c2_" + c2, cus: c2, price: "price_team_test", status: "active", start: start, end: end, tenant: t2,
		typ: "checkout.session.completed", id: newEventID(t), created: base.Add(time.Second)}
	e.post(versioned(t, "checkout.session.completed", b))
	if r := e.waitEvent(b.id); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "live subscription") {
		t.Fatalf("checkout while the old customer is live: %s %s", r.Status, deref(r.Reason))
	}
	a.typ, a.id, a.created, a.status = "customer.subscription.deleted", newEventID(t), base.Add(2*time.Second), "canceled"
	e.processed(versioned(t, "subscription", a))
	b.id, b.created = newEventID(t), base.Add(3*time.Second)
	e.processed(versioned(t, "checkout.session.completed", b))
	if c := e.admin(http.MethodGet, "/admin/v1/tenants/"+t2, nil).Body["stripe_customer_id"]; c != c2 {
		t.Fatalf("after churn, new checkout: customer %v, want %s", c, c2)
	}
}

// invoice.payment_failed never sets a status (with pending_if_incomplete
// Stripe keeps the subscription active); invoice.paid of an older invoice
// does not end grace, only the latest one's does.
func TestInvoicesNeverDecideStatusExceptTheLatestPaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{grace: time.Hour})
	e.plans()
	cus, sub := newCustomer(), "sub_inv_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	p := vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_pro_test", status: "active", start: start, end: end,
		typ: "customer.subscription.created", id: newEventID(t), created: base, invoice: "in_new_" + sub}
	e.processed(versioned(t, "subscription", p))
	f := p
	f.typ, f.id, f.created, f.attempts = "invoice.payment_failed", newEventID(t), base.Add(time.Second), 1
	e.processed(versioned(t, "invoice", f))
	if st := e.sub(sub); st.Status != "active" || e.snapshot(tenant).Plan != "pro" {
		t.Fatalf("payment_failed made %+v", st)
	}
	p.typ, p.id, p.created, p.status = "customer.subscription.updated", newEventID(t), base.Add(2*time.Second), "past_due"
	e.processed(versioned(t, "subscription", p))
	older := p
	older.typ, older.id, older.created, older.invoice = "invoice.paid", newEventID(t), base.Add(3*time.Second), "in_old_"+sub
	e.post(versioned(t, "invoice", older))
	if r := e.waitEvent(older.id); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "latest invoice") || e.sub(sub).Status != "past_due" {
		t.Fatalf("older invoice paid: %s %s, status %s", r.Status, deref(r.Reason), e.sub(sub).Status)
	}
	latest := p
	latest.typ, latest.id, latest.created = "invoice.paid", newEventID(t), base.Add(4*time.Second)
	e.processed(versioned(t, "invoice", latest))
	if st := e.sub(sub); st.Status != "active" || st.GraceEndsAt != nil {
		t.Fatalf("latest invoice paid: %+v", st)
	}
}

// Bad input: invalid UTF-8 and lone surrogates in a signed body are stored
// (as U+FFFD) and processed; two t= in Stripe-Signature are a 400.
func TestBadBytesAreStoredAndTwoTimestampsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_bytes_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	p := vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_pro_test", status: "active", start: base.Add(-time.Hour),
		end: base.AddDate(0, 1, 0), typ: "customer.subscription.created", id: newEventID(t), created: base}
	body := versioned(t, "subscription", p)
	body = []byte(strings.Replace(string(body), `"metadata":{}`, "\"metadata\":{\"note\":\"caf\xe9 \xff\","+`"surrogate":"x\ud800y","pair":"\ud83d\ude00","low":"\udc00"}`, 1))
	if utf8.Valid(body) {
		t.Fatal("the body was meant to hold invalid UTF-8")
	}
	r := e.post(body)
	if r.Status != http.StatusOK {
		t.Fatalf("bad bytes: %d %s", r.Status, r.Raw)
	}
	if ev := e.waitEvent(p.id); ev.Status != billing.StatusProcessed || e.tenantPlan(tenant) != "pro" {
		t.Fatalf("bad bytes: %+v plan %s", ev, e.tenantPlan(tenant))
	}
	got := e.admin(http.MethodGet, "/admin/v1/stripe/events/"+p.id, nil)
	if !strings.Contains(got.Raw, `caf\ufffd \ufffd`) && !strings.Contains(got.Raw, "caf\uFFFD \uFFFD") {
		t.Fatalf("stored payload without replacement characters: %.600s", got.Raw)
	}
	if !strings.Contains(got.Raw, "😀") && !strings.Contains(got.Raw, `\ud83d\ude00`) {
		t.Fatalf("a valid surrogate pair was not kept: %.600s", got.Raw)
	}

	two := versioned(t, "subscription", vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_pro_test", status: "active",
		start: base, end: base.AddDate(0, 1, 0), typ: "customer.subscription.updated", id: newEventID(t), created: base.Add(time.Second)})
	sig := sign(two, secret, time.Now())
	sig = "t=" + "1," + sig
	if r := e.postSigned(two, sig); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, "t=") {
		t.Fatalf("two t=: %d %s", r.Status, r.Raw)
	}
}

// Thin events (v2 event notifications such as the meter error report) are
// stored and answered 2xx.
func TestThinEventsAreAcceptedAndStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	id := newEventID(t)
	body := []byte(`{"id":"` + id + `","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","livemode":false,` +
		`"created":"` + time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + `","related_object":{"id":"mtr_test_123","type":"billing.meter","url":"/v1/billing/meters/mtr_test_123"},"context":null}`)
	r := e.post(body)
	if r.Status != http.StatusOK {
		t.Fatalf("thin event: %d %s", r.Status, r.Raw)
	}
	if ev := e.waitEvent(id); ev.Status != billing.StatusProcessed {
		t.Fatalf("thin event: %+v %s", ev, deref(ev.Reason))
	}
	got := e.admin(http.MethodGet, "/admin/v1/stripe/events/"+id, nil)
	if got.Body["type"] != "v1.billing.meter.error_report_triggered" || !strings.Contains(got.Raw, "mtr_test_123") {
		t.Fatalf("stored thin event: %s", got.Raw)
	}
}

// A plan change that Stripe answered with a 500 is retried under a new
// idempotency key (Stripe replays a saved 500 for 24 hours under the old
// one); one that got no answer keeps its key.
func TestPlanChangeAfterAStripeErrorUsesANewIdempotencyKey(t *testing.T) {
	t.Parallel()
	fs := newFakeStripe(t)
	e := newEnv(t, envOpts{stripeBase: fs.URL})
	e.plans()
	cus, sub := newCustomer(), "sub_idem_"+newCustomer()
	tenant := e.tenant("pro", cus)
	base := time.Now().Add(-time.Minute)
	fs.setSub(fakeSub(sub, cus, "active", base.Unix(), base.AddDate(0, 1, 0).Unix(), [3]any{"si_" + sub, "price_pro_test", 1}))
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status)
		VALUES ($1, $2, $3, 'price_pro_test', $4, 'active')`, sub, tenant, cus, "si_"+sub); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.failNext, fs.failCode = 1, http.StatusInternalServerError
	fs.mu.Unlock()
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"team"}`)); r.Status != http.StatusBadGateway {
		t.Fatalf("first try: %d %s, want 502", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"team"}`)); r.Status != http.StatusOK || e.tenantPlan(tenant) != "team" {
		t.Fatalf("second try: %d %s plan %s, want 200 team", r.Status, r.Raw, e.tenantPlan(tenant))
	}
	posts := fs.postsTo("/v1/subscriptions/" + sub)
	// stripe-go retries a 500 itself under the same key; the admin's retry
	// must use another.
	keys := map[string]bool{}
	for _, p := range posts {
		keys[p.Key] = true
	}
	if len(keys) != 2 || posts[0].Key == posts[len(posts)-1].Key {
		t.Fatalf("idempotency keys %v over %d posts, want the retry under a new key", keys, len(posts))
	}
}

// Proration is configurable; pending_if_incomplete sends always_invoice with
// payment_behavior pending_if_incomplete and raises limits only once paid:
// an update waiting for payment changes nothing here, and the webhook of
// the paid update applies it.
func TestPlanChangeProrationAndLimitsRiseOnlyOncePaid(t *testing.T) {
	t.Parallel()
	fs := newFakeStripe(t)
	e := newEnv(t, envOpts{stripeBase: fs.URL, proration: billing.ProrationPaidFirst})
	e.plans()
	cus, sub := newCustomer(), "sub_paid1st_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	fs.setSub(fakeSub(sub, cus, "active", start.Unix(), end.Unix(), [3]any{"si_" + sub, "price_pro_test", 1}))
	p := vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_pro_test", status: "active", start: start, end: end,
		typ: "customer.subscription.created", id: newEventID(t), created: base}
	e.processed(versioned(t, "subscription", p))
	v := e.version(tenant)
	fs.mu.Lock()
	fs.pending = true
	fs.mu.Unlock()
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"team"}`)); r.Status != http.StatusOK {
		t.Fatalf("plan change: %d %s", r.Status, r.Raw)
	}
	posts := fs.postsTo("/v1/subscriptions/" + sub)
	if len(posts) != 1 || posts[0].Form.Get("proration_behavior") != "always_invoice" || posts[0].Form.Get("payment_behavior") != "pending_if_incomplete" {
		t.Fatalf("update sent: %+v", posts)
	}
	if e.tenantPlan(tenant) != "pro" || e.version(tenant) != v {
		t.Fatalf("pending update raised limits before payment: plan %s version %d→%d", e.tenantPlan(tenant), v, e.version(tenant))
	}
	// Paid: Stripe applies the update and says so.
	fs.setSub(fakeSub(sub, cus, "active", start.Unix(), end.Unix(), [3]any{"si_" + sub, "price_team_test", 1}))
	p.typ, p.id, p.created = "customer.subscription.updated", newEventID(t), base.Add(time.Second)
	e.processed(versioned(t, "subscription", p))
	if e.tenantPlan(tenant) != "team" {
		t.Fatalf("after the paid update: plan %s, want team", e.tenantPlan(tenant))
	}
}

func TestProrationOptionIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noWorker: true})
	ins, err := jobs.NewInsertClient(e.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := billing.New(e.pool, e.ents, e.cat, ins, nil, billing.Options{Proration: "sometimes"}); err == nil || !strings.Contains(err.Error(), "proration") {
		t.Fatalf("billing.New with proration \"sometimes\": %v, want an error naming proration", err)
	}
	for _, p := range []string{billing.ProrationCreate, billing.ProrationAlwaysInvoice, billing.ProrationNone, billing.ProrationPaidFirst} {
		if !billing.ValidProration(p) {
			t.Fatalf("%s refused", p)
		}
	}
}

// A plan change that got no answer from Stripe keeps its idempotency key
// (Stripe may have applied it; the same key makes the retry safe).
func TestPlanChangeWithoutAnAnswerKeepsItsKey(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	e := newEnv(t, envOpts{stripeBase: closed, noWorker: true})
	e.plans()
	cus, sub := newCustomer(), "sub_noanswer_"+newCustomer()
	tenant := e.tenant("pro", cus)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status)
		VALUES ($1, $2, $3, 'price_pro_test', $4, 'active')`, sub, tenant, cus, "si_"+sub); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"team"}`)); r.Status != http.StatusBadGateway {
			t.Fatalf("unreachable Stripe: %d %s", r.Status, r.Raw)
		}
	}
	var attempt int
	if err := e.pool.QueryRow(context.Background(), `SELECT attempt FROM stripe_plan_changes WHERE base_key LIKE '%' || $1 || '%'`, sub).Scan(&attempt); err != nil || attempt != 0 {
		t.Fatalf("attempt %d (%v), want 0: no answer, same key", attempt, err)
	}
}

// Two entitlement summaries of the same second delivered in reverse end on
// the newer list (without a key: ordered through previous_attributes).
func TestSameSecondSummariesInReverseEndOnTheNewerList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus := newCustomer()
	tenant := e.tenant("free", cus)
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	withPrev := func(body []byte, prev []string) []byte {
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Fatal(err)
		}
		data := []any{}
		for _, k := range prev {
			data = append(data, map[string]any{"id": "ent_" + k, "object": "entitlements.active_entitlement", "lookup_key": k})
		}
		ev["data"].(map[string]any)["previous_attributes"] = map[string]any{"entitlements": map[string]any{"data": data}}
		out, _ := json.Marshal(ev)
		return out
	}
	first, second := newEventID(t), newEventID(t)
	older := withPrev(summaryEvent(t, first, cus, []string{"sso"}, false, at), []string{})
	newer := withPrev(summaryEvent(t, second, cus, []string{"sso", "exports"}, false, at), []string{"sso"})
	e.processed(newer)
	e.post(older)
	r := e.waitEvent(first)
	if f := e.snapshot(tenant).Features; strings.Join(f, ",") != "exports,sso" || r.Status != billing.StatusIgnored {
		t.Fatalf("features %v, older summary %s %s; want [exports sso] and the older one ignored", f, r.Status, deref(r.Reason))
	}
}
