package billing_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

// stripe-mock's canned objects (v0.189.0): every subscription it returns
// has this item price, and every entitlement list this one lookup key.
const (
	mockPrice   = "price_1PgafmB7WZ01zgkW6dKueIc5"
	mockSubID   = "sub_1Pgc6rB7WZ01zgkWNy0Cn5nw"
	mockFeature = "something"
)

func summaryEvent(t testing.TB, id, customer string, keys []string, hasMore bool, created time.Time) []byte {
	t.Helper()
	return fixture(t, "real/entitlements.active_entitlement_summary.updated.json", id, created, func(o map[string]any) {
		o["customer"] = customer
		data := []any{}
		for _, k := range keys {
			data = append(data, map[string]any{"id": "ent_" + k, "object": "entitlements.active_entitlement", "feature": "feat_" + k, "livemode": false, "lookup_key": k})
		}
		o["entitlements"] = map[string]any{"object": "list", "data": data, "has_more": hasMore, "url": "/v1/customer/" + customer + "/entitlements"}
	})
}

func TestEntitlementSummarySetsFeaturesFromThePayloadWithoutAKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus := newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)

	id := newEventID(t)
	e.post(summaryEvent(t, id, cus, []string{"sso", "exports", "sso"}, false, base))
	if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
		t.Fatalf("summary: %+v %s", r, deref(r.Reason))
	}
	if f := e.snapshot(tenant).Features; strings.Join(f, ",") != "exports,sso" {
		t.Fatalf("features %v, want [exports sso]", f)
	}
	// An older summary arriving late is stale.
	old := newEventID(t)
	e.post(summaryEvent(t, old, cus, []string{"legacy"}, false, base.Add(-time.Hour)))
	if r := e.waitEvent(old); r.Status != billing.StatusIgnored {
		t.Fatalf("older summary: %+v", r)
	}
}

// With a secret key a summary is a notification: the list comes from
// Stripe (whether or not has_more says the payload is partial), which also
// settles summaries of the same second delivered in reverse.
func TestEntitlementSummaryWithAKeyIsReListed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{stripeBase: stripemock.Start(t)})
	e.plans()
	cus := newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	for i, hasMore := range []bool{false, true} {
		more := newEventID(t)
		e.post(summaryEvent(t, more, cus, []string{"partial_only"}, hasMore, base.Add(time.Duration(i)*time.Second)))
		if r := e.waitEvent(more); r.Status != billing.StatusProcessed {
			t.Fatalf("summary: %+v %s", r, deref(r.Reason))
		}
		if f := e.snapshot(tenant).Features; strings.Join(f, ",") != mockFeature {
			t.Fatalf("features %v, want stripe-mock's [%s] (re-listed)", f, mockFeature)
		}
	}
}

func TestEntitlementSummaryWithHasMoreFailsWithoutStripeAndRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noWorker: true})
	e.plans()
	cus := newCustomer()
	e.tenant("free", cus)
	id := newEventID(t)
	e.post(summaryEvent(t, id, cus, []string{"a"}, true, time.Now()))
	err := e.svc.ProcessEvent(context.Background(), id, false)
	if err == nil || !strings.Contains(err.Error(), "STRIPE_SECRET_KEY") {
		t.Fatalf("ProcessEvent = %v, want an error naming STRIPE_SECRET_KEY", err)
	}
}

// A failure on the last attempt marks the event failed with its error; an
// admin's replay then applies it.
func TestEventFailsAfterTheLastAttemptAndReplayApplies(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	e := newEnv(t, envOpts{noWorker: true, beforeApply: func(ctx context.Context, id string) error {
		if fail.Load() {
			return errTest
		}
		return nil
	}})
	e.plans()
	cus, sub := newCustomer(), "sub_fail_"+newCustomer()
	tenant := e.tenant("free", cus)
	id := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", time.Now()))
	w := &billing.EventWorker{S: e.svc}
	job := func(attempt int) *river.Job[billing.EventArgs] {
		return &river.Job[billing.EventArgs]{JobRow: &rivertype.JobRow{Attempt: attempt, MaxAttempts: billing.MaxAttempts},
			Args: billing.EventArgs{EventID: id, CustomerID: cus}}
	}
	if err := w.Work(context.Background(), job(1)); err == nil {
		t.Fatal("Work succeeded through a failing apply")
	}
	if r := e.event(id); r.Status != billing.StatusPending || r.Attempts != 1 || !strings.Contains(deref(r.LastErr), "test failure") {
		t.Fatalf("after attempt 1: %+v %s", r, deref(r.LastErr))
	}
	if err := w.Work(context.Background(), job(billing.MaxAttempts)); err == nil {
		t.Fatal("Work succeeded through a failing apply")
	}
	if r := e.event(id); r.Status != billing.StatusFailed || r.Attempts != 2 {
		t.Fatalf("after the last attempt: %+v", r)
	}
	failedList := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=failed", nil)
	if !strings.Contains(failedList.Raw, id) || !strings.Contains(failedList.Raw, "test failure") {
		t.Fatalf("failed list: %s", failedList.Raw)
	}
	if e.tenantPlan(tenant) != "free" {
		t.Fatal("a failed event changed the plan")
	}
	fail.Store(false)
	if r := e.admin(http.MethodPost, "/admin/v1/stripe/events/"+id+"/replay", nil); r.Status != http.StatusAccepted {
		t.Fatalf("replay: %d %s", r.Status, r.Raw)
	}
	e.startWorker()
	if r := e.waitEvent(id); r.Status != billing.StatusProcessed || e.tenantPlan(tenant) != "pro" {
		t.Fatalf("replayed: %+v plan %s", r, e.tenantPlan(tenant))
	}
}

type testError struct{}

func (testError) Error() string { return "test failure" }

var errTest = testError{}

// A worker stopped in the middle of applying an event leaves it pending; the
// next worker applies it, once.
func TestWorkerKilledMidEventProcessesItAfterRestartOnce(t *testing.T) {
	t.Parallel()
	var block atomic.Bool
	block.Store(true)
	entered := make(chan struct{}, 1)
	e := newEnv(t, envOpts{noWorker: true, beforeApply: func(ctx context.Context, id string) error {
		if !block.Load() {
			return nil
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done() // hold the transaction open until the worker dies
		return ctx.Err()
	}})
	e.plans()
	cus, sub := newCustomer(), "sub_kill_"+newCustomer()
	tenant := e.tenant("free", cus)
	v0 := e.version(tenant)
	first := e.startWorker()
	id := newEventID(t)
	if r := e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", time.Now())); r.Status != http.StatusOK {
		t.Fatalf("post: %d", r.Status)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker never started applying the event")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.StopAndCancel(ctx); err != nil {
		t.Fatalf("stop worker: %v", err)
	}
	if r := e.event(id); r.Status != billing.StatusPending || e.version(tenant) != v0 || e.tenantPlan(tenant) != "free" {
		t.Fatalf("after the kill: %+v version %d plan %s; nothing may have applied", r, e.version(tenant), e.tenantPlan(tenant))
	}
	block.Store(false)
	e.startWorker()
	deadline := time.Now().Add(15 * time.Second)
	for e.event(id).Status == billing.StatusPending {
		if time.Now().After(deadline) {
			t.Fatalf("not processed after restart: %+v", e.event(id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := e.event(id); r.Status != billing.StatusProcessed || e.version(tenant) != v0+1 || e.tenantPlan(tenant) != "pro" {
		t.Fatalf("after restart: %+v version %d (want %d) plan %s", r, e.version(tenant), v0+1, e.tenantPlan(tenant))
	}
}

func TestPlanChangeGoesThroughStripeAndItsWebhookIsANoop(t *testing.T) {
	t.Parallel()
	fs := newFakeStripe(t)
	fs.validate = stripemock.Start(t) // every update's shape is checked by stripe-mock
	e := newEnv(t, envOpts{stripeBase: fs.URL})
	e.plans()
	cus, sub := newCustomer(), "sub_pc_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	start := base.Add(-time.Hour).Unix()
	fs.setSub(fakeSub(sub, cus, "active", start, base.Add(-time.Hour).AddDate(0, 1, 0).Unix(), [3]any{"si_" + sub, "price_pro_test", 1}))
	id := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", base))
	if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
		t.Fatalf("created: %+v %s", r, deref(r.Reason))
	}

	r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"team"}`))
	if r.Status != http.StatusOK || r.Body["plan"] != "team" {
		t.Fatalf("plan change: %d %s", r.Status, r.Raw)
	}
	if p := e.sub(sub).Price; p == nil || *p != "price_team_test" {
		t.Fatalf("subscription price %v, want price_team_test", p)
	}
	reqs := fs.postsTo("/v1/subscriptions/" + sub)
	if len(reqs) != 1 {
		t.Fatalf("%d updates sent to Stripe, want 1: %+v", len(reqs), reqs)
	}
	rq := reqs[0]
	if rq.Form.Get("items[0][id]") != "si_"+sub || rq.Form.Get("items[0][price]") != "price_team_test" ||
		rq.Form.Get("proration_behavior") != "create_prorations" || rq.Key == "" {
		t.Fatalf("Stripe request key %q form %v", rq.Key, rq.Form)
	}
	v := e.version(tenant)
	// Stripe's webhook of our own change: nothing left to change.
	echo := newEventID(t)
	e.post(withPeriod(t, subEvent(t, "customer.subscription.updated", echo, cus, sub, "active", "price_team_test", time.Now()), base.Add(-time.Hour)))
	if ev := e.waitEvent(echo); ev.Status != billing.StatusProcessed {
		t.Fatalf("echo webhook: %+v", ev)
	}
	if e.version(tenant) != v || e.tenantPlan(tenant) != "team" {
		t.Fatalf("echo webhook changed the version %d→%d or plan %s", v, e.version(tenant), e.tenantPlan(tenant))
	}

	// A late event from before the change does not flip the plan back: it
	// is a notification, and Stripe has the subscription on team now.
	before := newEventID(t)
	e.post(withPeriod(t, subEvent(t, "customer.subscription.updated", before, cus, sub, "active", "price_pro_test", base.Add(time.Second)), base.Add(-time.Hour)))
	if ev := e.waitEvent(before); ev.Status == billing.StatusFailed || e.tenantPlan(tenant) != "team" || e.version(tenant) != v {
		t.Fatalf("pre-change event: %+v plan %s version %d→%d, want team unchanged", ev, e.tenantPlan(tenant), v, e.version(tenant))
	}

	// A plan without a Stripe price cannot be used with a subscription.
	e.plan("noprice_"+strings.ToLower(newCustomer()[4:10]), "", 7)
	var np string
	_ = e.pool.QueryRow(context.Background(), `SELECT key FROM plans WHERE stripe_price_id IS NULL AND key LIKE 'noprice_%' LIMIT 1`).Scan(&np)
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"`+np+`"}`)); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, `"field":"plan"`) {
		t.Fatalf("plan without price: %d %s", r.Status, r.Raw)
	}
	// A subscription stored without its item id: the item is read from
	// Stripe first, then updated, then kept.
	cus2, sub2 := newCustomer(), "sub_noitem_"+newCustomer()
	t2 := e.tenant("pro", cus2)
	fs.setSub(fakeSub(sub2, cus2, "active", start, base.AddDate(0, 1, 0).Unix(), [3]any{"si_other", "price_addon_x", 1}, [3]any{"si_" + sub2, "price_pro_test", 1}))
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, status)
		VALUES ($1, $2, $3, 'price_pro_test', 'active')`, sub2, t2, cus2); err != nil {
		t.Fatal(err)
	}
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+t2+"/plan", []byte(`{"plan":"team"}`)); r.Status != http.StatusOK {
		t.Fatalf("change without item id: %d %s", r.Status, r.Raw)
	}
	if reqs := fs.postsTo("/v1/subscriptions/" + sub2); len(reqs) != 1 || reqs[0].Form.Get("items[0][id]") != "si_"+sub2 {
		t.Fatalf("requests without item id: %+v", reqs)
	}
	var item string
	_ = e.pool.QueryRow(context.Background(), `SELECT stripe_item_id FROM subscriptions WHERE id = $1`, sub2).Scan(&item)
	if item != "si_"+sub2 || e.tenantPlan(t2) != "team" {
		t.Fatalf("item %q plan %s after the change", item, e.tenantPlan(t2))
	}

	// A tenant without a subscription changes locally.
	local := e.tenant("free", "")
	if r := e.admin(http.MethodPut, "/admin/v1/tenants/"+local+"/plan", []byte(`{"plan":"pro"}`)); r.Status != http.StatusOK || e.tenantPlan(local) != "pro" {
		t.Fatalf("local change: %d %s", r.Status, r.Raw)
	}
}

func TestPlanChangeStripeErrorIs502AndChangesNothing(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Minute)
	check := func(t *testing.T, e *env, sub string) {
		cus := newCustomer()
		tenant := e.tenant("pro", cus)
		// Stored as a subscription event would have left it.
		if _, err := e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status, last_event_at)
			VALUES ($1, $2, $3, 'price_pro_test', $4, 'active', $5)`, sub, tenant, cus, "si_"+sub, base); err != nil {
			t.Fatal(err)
		}
		v := e.version(tenant)
		r := e.admin(http.MethodPut, "/admin/v1/tenants/"+tenant+"/plan", []byte(`{"plan":"team"}`))
		if r.Status != http.StatusBadGateway || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("status %d, want 502 problem: %s", r.Status, r.Raw)
		}
		if !strings.Contains(r.Raw, "Stripe") {
			t.Fatalf("detail does not mention Stripe: %s", r.Raw)
		}
		if e.tenantPlan(tenant) != "pro" || e.version(tenant) != v || *e.sub(sub).Price != "price_pro_test" {
			t.Fatalf("a refused change changed plan %s version %d→%d price %s", e.tenantPlan(tenant), v, e.version(tenant), *e.sub(sub).Price)
		}
		t.Logf("502 detail: %v", r.Body["detail"])
	}
	t.Run("stripe refuses", func(t *testing.T) {
		e := newEnv(t, envOpts{stripeBase: stripemock.Start(t)})
		e.plans()
		// stripe-mock answers 404 invalid_request_error ("Unrecognized
		// request URL") for an id that is no single path segment.
		check(t, e, "sub_gone/"+newCustomer())
	})
	t.Run("stripe unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		ln.Close()
		e := newEnv(t, envOpts{stripeBase: closed})
		e.plans()
		check(t, e, "sub_net_"+newCustomer())
	})
}

func TestResyncRepairsDriftAndRecordsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{stripeBase: stripemock.Start(t)})
	e.plans()
	if _, err := e.cat.GetPlan(context.Background(), "mockplan"); err != nil {
		e.plan("mockplan", mockPrice, 77)
	}
	cus := newCustomer()
	tenant := e.tenant("pro", cus)
	// Our copy of stripe-mock's subscription, out of date on every field.
	_, err := e.pool.Exec(context.Background(), `DELETE FROM subscriptions WHERE id = $1`, mockSubID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.pool.Exec(context.Background(), `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, status, cancel_at_period_end, past_due_since, grace_ends_at)
		VALUES ($1, $2, $3, 'price_pro_test', 'past_due', true, now(), now() + interval '1 day')`, mockSubID, tenant, cus)
	if err != nil {
		t.Fatal(err)
	}
	v := e.version(tenant)
	r := e.admin(http.MethodPost, "/admin/v1/tenants/"+tenant+"/resync", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("resync: %d %s", r.Status, r.Raw)
	}
	fields := map[string]bool{}
	for _, x := range r.Body["repairs"].([]any) {
		fields[x.(map[string]any)["field"].(string)] = true
	}
	for _, f := range []string{"status", "price", "cancel_at_period_end", "plan", "features"} {
		if !fields[f] {
			t.Fatalf("repairs %v miss %s: %s", fields, f, r.Raw)
		}
	}
	if st := e.sub(mockSubID); st.Status != "active" || st.GraceEndsAt != nil || *st.Price != mockPrice {
		t.Fatalf("after resync: %+v", st)
	}
	snap := e.snapshot(tenant)
	if snap.Plan != "mockplan" || strings.Join(snap.Features, ",") != mockFeature || e.version(tenant) != v+1 {
		t.Fatalf("after resync: plan %s features %v version %d→%d", snap.Plan, snap.Features, v, e.version(tenant))
	}
	drift := e.admin(http.MethodGet, "/admin/v1/stripe/drift?tenant_id="+tenant, nil)
	var body struct {
		Repairs []billing.DriftRepair `json:"repairs"`
	}
	_ = json.Unmarshal([]byte(drift.Raw), &body)
	if drift.Status != http.StatusOK || len(body.Repairs) != len(fields) || body.Repairs[0].TenantID != tenant {
		t.Fatalf("drift list: %d %s", drift.Status, drift.Raw)
	}
	// Nothing differs any more: a second resync repairs nothing.
	again := e.admin(http.MethodPost, "/admin/v1/tenants/"+tenant+"/resync", nil)
	if again.Status != http.StatusOK || len(again.Body["repairs"].([]any)) != 0 || e.version(tenant) != v+1 {
		t.Fatalf("second resync: %s (version %d)", again.Raw, e.version(tenant))
	}
	// The periodic job resyncs every linked tenant the same way.
	if err := (&billing.ResyncWorker{S: e.svc}).Work(context.Background(), &river.Job[billing.ResyncArgs]{}); err != nil {
		t.Fatal(err)
	}

	if r := e.admin(http.MethodPost, "/admin/v1/tenants/not-a-uuid/resync", nil); r.Status != http.StatusNotFound {
		t.Fatalf("bad id: %d", r.Status)
	}
	if r := e.admin(http.MethodPost, "/admin/v1/tenants/"+e.tenant("free", "")+"/resync", nil); r.Status != http.StatusConflict {
		t.Fatalf("tenant without customer: %d %s", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodGet, "/admin/v1/stripe/drift?tenant_id=nope", nil); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, "tenant_id") {
		t.Fatalf("bad tenant filter: %d %s", r.Status, r.Raw)
	}
}

func TestResyncWithoutStripeIs503(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noWorker: true})
	e.plans()
	tenant := e.tenant("free", newCustomer())
	if r := e.admin(http.MethodPost, "/admin/v1/tenants/"+tenant+"/resync", nil); r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Raw, "STRIPE_SECRET_KEY") {
		t.Fatalf("resync without Stripe: %d %s", r.Status, r.Raw)
	}
}
