package billing_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/limitstore"
)

// invoiceEvent builds an invoice event for sub.
func invoiceEvent(t testing.TB, typ, id, customer, sub string, created time.Time, mutate func(o map[string]any)) []byte {
	t.Helper()
	b := fixture(t, "real/invoice.paid.json", id, created, func(o map[string]any) {
		// The latest invoice of subEvent's subscriptions.
		o["id"], o["customer"], o["subscription"] = "in_"+sub, customer, sub
		if mutate != nil {
			mutate(o)
		}
	})
	var ev map[string]any
	_ = json.Unmarshal(b, &ev)
	ev["type"] = typ
	out, _ := json.Marshal(ev)
	return out
}

func TestPastDueKeepsThePlanForTheGracePeriodThenFallsBack(t *testing.T) {
	t.Parallel()
	const grace = 1500 * time.Millisecond
	e := newEnv(t, envOpts{grace: grace})
	e.plans()
	cus, sub := newCustomer(), "sub_grace_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	id := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", base))
	e.waitEvent(id)

	// Stripe turns the subscription past_due: the grace period starts.
	pd := newEventID(t)
	e.post(subEvent(t, "customer.subscription.updated", pd, cus, sub, "past_due", "price_pro_test", base.Add(500*time.Millisecond)))
	e.waitEvent(pd)
	// The failed payment records the attempt count and the next attempt
	// (the status comes from the subscription only).
	next := time.Now().Add(72 * time.Hour).Truncate(time.Second)
	failed := newEventID(t)
	e.post(invoiceEvent(t, "invoice.payment_failed", failed, cus, sub, base.Add(time.Second), func(o map[string]any) {
		o["attempt_count"], o["next_payment_attempt"], o["status"], o["billing_reason"] = 1, next.Unix(), "open", "subscription_cycle"
	}))
	if r := e.waitEvent(failed); r.Status != billing.StatusProcessed {
		t.Fatalf("payment_failed: %+v %s", r, deref(r.Reason))
	}
	st := e.sub(sub)
	if st.Status != "past_due" || st.GraceEndsAt == nil || st.Attempts != 1 {
		t.Fatalf("after past_due and payment_failed: %+v", st)
	}
	graceEnds := *st.GraceEndsAt
	var nextAttempt time.Time
	_ = e.pool.QueryRow(context.Background(), `SELECT next_payment_attempt FROM subscriptions WHERE id = $1`, sub).Scan(&nextAttempt)
	if !nextAttempt.Equal(next) {
		t.Fatalf("next_payment_attempt %s, want %s", nextAttempt, next)
	}
	// A second failure continues the same grace period.
	failed2 := newEventID(t)
	e.post(invoiceEvent(t, "invoice.payment_failed", failed2, cus, sub, base.Add(2*time.Second), func(o map[string]any) {
		o["attempt_count"], o["next_payment_attempt"] = 2, next.Add(time.Hour).Unix()
	}))
	e.waitEvent(failed2)
	if st := e.sub(sub); st.Attempts != 2 || !st.GraceEndsAt.Equal(graceEnds) {
		t.Fatalf("second failure: %+v, want attempts 2 and the same grace end %s", st, graceEnds)
	}
	// Another subscription event saying past_due does not move the grace.
	pd2 := newEventID(t)
	e.post(subEvent(t, "customer.subscription.updated", pd2, cus, sub, "past_due", "price_pro_test", base.Add(3*time.Second)))
	e.waitEvent(pd2)
	if st := e.sub(sub); !st.GraceEndsAt.Equal(graceEnds) {
		t.Fatalf("grace moved to %s", st.GraceEndsAt)
	}
	if snap := e.snapshot(tenant); snap.Plan != "pro" || snap.Status != "past_due" {
		t.Fatalf("in grace: %s %s, want pro past_due", snap.Plan, snap.Status)
	}

	// Once the grace period is over, the periodic job refreshes the tenant
	// and the limiter's snapshot falls back to the default plan, once.
	for time.Now().Before(graceEnds) {
		time.Sleep(20 * time.Millisecond) // the grace period is real time
	}
	refreshed, err := e.svc.ExpireGrace(context.Background())
	if err != nil || len(refreshed) != 1 || refreshed[0] != tenant {
		t.Fatalf("ExpireGrace = %v, %v; want [%s]", refreshed, err, tenant)
	}
	cached, ok, err := limitstore.New(e.rdb, e.prefix).Snapshot(context.Background(), tenant)
	if err != nil || !ok || cached.Plan != "free" {
		t.Fatalf("redis snapshot after grace: %+v ok %v err %v, want free", cached, ok, err)
	}
	if again, _ := e.svc.ExpireGrace(context.Background()); len(again) != 0 {
		t.Fatalf("second ExpireGrace refreshed %v again", again)
	}

	// invoice.paid ends it: back to active, the plan restored.
	paid := newEventID(t)
	e.post(invoiceEvent(t, "invoice.paid", paid, cus, sub, base.Add(4*time.Second), nil))
	if r := e.waitEvent(paid); r.Status != billing.StatusProcessed {
		t.Fatalf("invoice.paid: %+v %s", r, deref(r.Reason))
	}
	if st := e.sub(sub); st.Status != "active" || st.GraceEndsAt != nil || st.Attempts != 0 {
		t.Fatalf("after invoice.paid: %+v", st)
	}
	if snap := e.snapshot(tenant); snap.Plan != "pro" || snap.Status != "active" {
		t.Fatalf("after invoice.paid: %s %s, want pro active", snap.Plan, snap.Status)
	}
	// A late failure from before the payment does not restart the grace.
	late := newEventID(t)
	e.post(invoiceEvent(t, "invoice.payment_failed", late, cus, sub, base.Add(2500*time.Millisecond), nil))
	if r := e.waitEvent(late); r.Status == billing.StatusFailed || e.sub(sub).Status != "active" {
		t.Fatalf("late failure: %+v status %s", r, e.sub(sub).Status)
	}
}

func TestInvoicePaidEndsGraceAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{grace: time.Hour})
	e.plans()
	cus, sub := newCustomer(), "sub_paid_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	id := newEventID(t)
	e.post(subEvent(t, "customer.subscription.updated", id, cus, sub, "past_due", "price_team_test", base))
	e.waitEvent(id)
	if st := e.sub(sub); st.GraceEndsAt == nil || time.Until(*st.GraceEndsAt) < 59*time.Minute {
		t.Fatalf("past_due: grace %v, want about an hour from now", st.GraceEndsAt)
	}
	v := e.version(tenant)
	paid := newEventID(t)
	e.post(invoiceEvent(t, "invoice.paid", paid, cus, sub, base.Add(time.Second), nil))
	e.waitEvent(paid)
	if st := e.sub(sub); st.Status != "active" || st.GraceEndsAt != nil {
		t.Fatalf("after paid: %+v", st)
	}
	if e.version(tenant) != v+1 || e.snapshot(tenant).Status != "active" {
		t.Fatalf("version %d→%d status %s", v, e.version(tenant), e.snapshot(tenant).Status)
	}
	// Paid again (a duplicate with another id): nothing changes.
	again := newEventID(t)
	e.post(invoiceEvent(t, "invoice.paid", again, cus, sub, base.Add(2*time.Second), nil))
	e.waitEvent(again)
	if e.version(tenant) != v+1 {
		t.Fatalf("a no-op invoice.paid bumped the version")
	}
}

func TestInvoiceCreatedForACycleRollsThePeriod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_cycle_"+newCustomer()
	e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	id := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", base))
	e.waitEvent(id)
	start := *e.sub(sub).PeriodStart
	newStart, newEnd := start.AddDate(0, 1, 0), start.AddDate(0, 2, 0)
	cyc := newEventID(t)
	e.post(invoiceEvent(t, "invoice.created", cyc, cus, sub, base.Add(time.Second), func(o map[string]any) {
		o["billing_reason"] = "subscription_cycle"
		line := o["lines"].(map[string]any)["data"].([]any)[0].(map[string]any)
		line["type"] = "subscription"
		line["period"] = map[string]any{"start": newStart.Unix(), "end": newEnd.Unix()}
	}))
	if r := e.waitEvent(cyc); r.Status != billing.StatusProcessed {
		t.Fatalf("invoice.created: %+v %s", r, deref(r.Reason))
	}
	if got := *e.sub(sub).PeriodStart; !got.Equal(newStart) {
		t.Fatalf("period start %s, want %s", got, newStart)
	}
	manual := newEventID(t)
	e.post(invoiceEvent(t, "invoice.created", manual, cus, sub, base.Add(2*time.Second), func(o map[string]any) { o["billing_reason"] = "manual" }))
	if r := e.waitEvent(manual); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "manual") {
		t.Fatalf("manual invoice.created: %+v %s", r, deref(r.Reason))
	}
}

func TestCheckoutLinksTheCustomerAndRerunsItsEarlierEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	tenant := e.tenant("free", "")
	cus, sub := newCustomer(), "sub_co_"+newCustomer()
	// Stripe often sends the subscription before the checkout completion.
	early := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", early, cus, sub, "active", "price_team_test", time.Now().Add(-time.Second)))
	if r := e.waitEvent(early); r.Status != billing.StatusIgnored {
		t.Fatalf("subscription before checkout: %+v", r)
	}
	co := newEventID(t)
	e.post(fixture(t, "derived/checkout.session.completed.subscription-mode.json", co, time.Now(), func(o map[string]any) {
		o["customer"], o["subscription"], o["client_reference_id"] = cus, sub, tenant
	}))
	if r := e.waitEvent(co); r.Status != billing.StatusProcessed {
		t.Fatalf("checkout: %+v %s", r, deref(r.Reason))
	}
	if r := e.waitEvent(early); r.Status != billing.StatusProcessed {
		t.Fatalf("re-run subscription event: %+v %s", r, deref(r.Reason))
	}
	if e.tenantPlan(tenant) != "team" || e.snapshot(tenant).Plan != "team" {
		t.Fatalf("plan %s, want team", e.tenantPlan(tenant))
	}
	// metadata.tenant_id works too; a session naming nobody is ignored.
	other := e.tenant("free", "")
	cus2 := newCustomer()
	co2 := newEventID(t)
	e.post(fixture(t, "derived/checkout.session.completed.subscription-mode.json", co2, time.Now(), func(o map[string]any) {
		o["customer"], o["client_reference_id"], o["metadata"] = cus2, "user_42", map[string]any{"tenant_id": other}
	}))
	if r := e.waitEvent(co2); r.Status != billing.StatusProcessed {
		t.Fatalf("checkout by metadata: %+v %s", r, deref(r.Reason))
	}
	co3 := newEventID(t)
	e.post(fixture(t, "derived/checkout.session.completed.subscription-mode.json", co3, time.Now(), func(o map[string]any) {
		o["customer"] = newCustomer()
	}))
	if r := e.waitEvent(co3); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "names no tenant") {
		t.Fatalf("checkout naming nobody: %+v %s", r, deref(r.Reason))
	}
	pay := newEventID(t)
	e.post(fixture(t, "real/checkout.session.completed.payment-mode.json", pay, time.Now(), nil))
	if r := e.waitEvent(pay); r.Status != billing.StatusIgnored {
		t.Fatalf("payment-mode checkout: %+v", r)
	}
}

func TestCustomerDeletedUnlinksAndFallsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_cd_"+newCustomer()
	tenant := e.tenant("free", cus)
	id := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", time.Now().Add(-time.Second)))
	e.waitEvent(id)
	del := newEventID(t)
	e.post(fixture(t, "real/customer.deleted.json", del, time.Now(), func(o map[string]any) { o["id"] = cus }))
	if r := e.waitEvent(del); r.Status != billing.StatusProcessed {
		t.Fatalf("customer.deleted: %+v %s", r, deref(r.Reason))
	}
	var linked *string
	_ = e.pool.QueryRow(context.Background(), `SELECT stripe_customer_id FROM tenants WHERE id = $1`, tenant).Scan(&linked)
	if linked != nil || e.snapshot(tenant).Plan != "free" || e.sub(sub).Status != "canceled" {
		t.Fatalf("after customer.deleted: linked %v plan %s status %s", linked, e.snapshot(tenant).Plan, e.sub(sub).Status)
	}
}

func TestPausedAndResumedFallBackAndRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_pz_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	for i, step := range []struct{ file, want string }{
		{"derived/customer.subscription.trial_will_end.json", "pro"},
		{"derived/customer.subscription.paused.json", "free"},
		{"derived/customer.subscription.resumed.json", "pro"},
	} {
		id := newEventID(t)
		e.post(fixture(t, step.file, id, base.Add(time.Duration(i)*time.Second), func(o map[string]any) {
			o["id"], o["customer"] = sub, cus
			o["items"].(map[string]any)["data"].([]any)[0].(map[string]any)["price"].(map[string]any)["id"] = "price_pro_test"
		}))
		if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
			t.Fatalf("%s: %+v %s", step.file, r, deref(r.Reason))
		}
		if got := e.snapshot(tenant).Plan; got != step.want {
			t.Fatalf("after %s: plan %s, want %s", step.file, got, step.want)
		}
	}
	var trialWillEnd *time.Time
	_ = e.pool.QueryRow(context.Background(), `SELECT trial_will_end_at FROM subscriptions WHERE id = $1`, sub).Scan(&trialWillEnd)
	if trialWillEnd == nil {
		t.Fatal("trial_will_end not recorded")
	}
}

func TestEventsAdminListGetReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_adm_"+newCustomer()
	tenant := e.tenant("free", cus)
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = newEventID(t)
		e.post(subEvent(t, "customer.subscription.updated", ids[i], cus, sub, "active", "price_pro_test", time.Now().Add(time.Duration(i-10)*time.Second)))
		e.waitEvent(ids[i])
	}
	if r := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=bogus", nil); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, `"field":"status"`) {
		t.Fatalf("bad status: %d %s", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodGet, "/admin/v1/stripe/events?limit=x", nil); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, `"field":"limit"`) {
		t.Fatalf("bad limit: %d %s", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodGet, "/admin/v1/stripe/events?cursor=%21", nil); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, `"field":"cursor"`) {
		t.Fatalf("bad cursor: %d %s", r.Status, r.Raw)
	}
	if r := do(t, http.MethodGet, e.srv.URL+"/admin/v1/stripe/events", "", nil, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("no token: %d", r.Status)
	}
	// Pages of one, newest first, following the cursor.
	seen := map[string]bool{}
	cursor := ""
	for range 3 {
		r := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=processed&limit=1&cursor="+cursor, nil)
		evs := r.Body["events"].([]any)
		if r.Status != http.StatusOK || len(evs) != 1 {
			t.Fatalf("page: %d %s", r.Status, r.Raw)
		}
		ev := evs[0].(map[string]any)
		if ev["status"] != "processed" || ev["payload"] != nil || seen[ev["id"].(string)] {
			t.Fatalf("page event %v", ev)
		}
		seen[ev["id"].(string)] = true
		cursor, _ = r.Body["next_cursor"].(string)
	}
	if !seen[ids[2]] || !seen[ids[1]] || !seen[ids[0]] {
		t.Fatalf("pages missed events: %v", seen)
	}
	got := e.admin(http.MethodGet, "/admin/v1/stripe/events/"+ids[0], nil)
	if got.Status != http.StatusOK || got.Body["payload"] == nil || got.Body["tenant_id"] != tenant || got.Body["attempts"] != float64(1) {
		t.Fatalf("get: %d %s", got.Status, got.Raw)
	}
	if r := e.admin(http.MethodGet, "/admin/v1/stripe/events/evt_nope", nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown event: %d", r.Status)
	}
	if r := e.admin(http.MethodPost, "/admin/v1/stripe/events/evt_nope/replay", nil); r.Status != http.StatusNotFound {
		t.Fatalf("replay unknown: %d", r.Status)
	}
	// A replay runs the newest event again: applied idempotently.
	v := e.version(tenant)
	r := e.admin(http.MethodPost, "/admin/v1/stripe/events/"+ids[2]+"/replay", nil)
	if r.Status != http.StatusAccepted || r.Body["status"] != "pending" {
		t.Fatalf("replay: %d %s", r.Status, r.Raw)
	}
	if ev := e.waitEvent(ids[2]); ev.Status != billing.StatusProcessed || ev.Attempts != 2 {
		t.Fatalf("replayed: %+v", ev)
	}
	if e.version(tenant) != v {
		t.Fatalf("replaying an applied event bumped the version %d→%d", v, e.version(tenant))
	}
}

func TestSubscriptionMetadataTenantIDLinksTheCustomer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	tenant := e.tenant("free", "")
	cus, sub := newCustomer(), "sub_md_"+newCustomer()
	id := newEventID(t)
	body := subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", time.Now())
	var ev map[string]any
	_ = json.Unmarshal(body, &ev)
	ev["data"].(map[string]any)["object"].(map[string]any)["metadata"] = map[string]any{"tenant_id": tenant}
	body, _ = json.Marshal(ev)
	e.post(body)
	if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
		t.Fatalf("metadata.tenant_id: %+v %s", r, deref(r.Reason))
	}
	var linked string
	_ = e.pool.QueryRow(context.Background(), `SELECT stripe_customer_id FROM tenants WHERE id = $1`, tenant).Scan(&linked)
	if linked != cus || e.tenantPlan(tenant) != "pro" {
		t.Fatalf("linked %q plan %s, want %s and pro", linked, e.tenantPlan(tenant), cus)
	}
}
