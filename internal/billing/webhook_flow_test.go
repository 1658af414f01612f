package billing_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/limitstore"
)

func TestSubscriptionLifecycleSetsPlanStatusAndFallsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_life_"+newCustomer()
	tenant := e.tenant("free", cus)
	v0 := e.version(tenant)
	base := time.Now().Add(-time.Minute)

	id := newEventID(t)
	if r := e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", base)); r.Status != http.StatusOK {
		t.Fatalf("created: %d %s", r.Status, r.Raw)
	}
	if r := e.waitEvent(id); r.Status != billing.StatusProcessed {
		t.Fatalf("created: %+v %s", r, deref(r.Reason))
	}
	if snap := e.snapshot(tenant); snap.Plan != "pro" || snap.Status != "active" || e.version(tenant) != v0+1 {
		t.Fatalf("after created: plan %s status %s version %d (was %d)", snap.Plan, snap.Status, e.version(tenant), v0)
	}
	if snap := e.snapshot(tenant); !snap.PeriodStart.Equal(time.Unix(base.Add(-time.Hour).Unix(), 0)) {
		t.Fatalf("period start %s, want the subscription's %s", snap.PeriodStart, base.Add(-time.Hour))
	}

	id = newEventID(t)
	e.post(subEvent(t, "customer.subscription.updated", id, cus, sub, "active", "price_team_test", base.Add(time.Second)))
	if r := e.waitEvent(id); r.Status != billing.StatusProcessed || e.tenantPlan(tenant) != "team" {
		t.Fatalf("updated to team: %+v plan %s", r, e.tenantPlan(tenant))
	}

	id = newEventID(t)
	e.post(subEvent(t, "customer.subscription.deleted", id, cus, sub, "canceled", "price_team_test", base.Add(2*time.Second)))
	e.waitEvent(id)
	if snap := e.snapshot(tenant); snap.Plan != "free" || snap.Status != "canceled" {
		t.Fatalf("after deleted: plan %s status %s, want free canceled", snap.Plan, snap.Status)
	}
	// The limiter's copy in Redis follows too.
	// (published just after the commit that waitEvent saw: poll)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cached, ok, err := limitstore.New(e.rdb, e.prefix).Snapshot(context.Background(), tenant)
		if err == nil && ok && cached.Plan == "free" && cached.Version == e.version(tenant) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis snapshot %+v ok %v err %v, want free at version %d", cached, ok, err, e.version(tenant))
		}
	}
}

func TestUpdatedBeforeCreatedKeepsTheNewer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_order_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)

	upd := newEventID(t)
	e.post(subEvent(t, "customer.subscription.updated", upd, cus, sub, "active", "price_team_test", base.Add(5*time.Second)))
	if r := e.waitEvent(upd); r.Status != billing.StatusProcessed {
		t.Fatalf("updated first: %+v %s", r, deref(r.Reason))
	}
	created := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", created, cus, sub, "incomplete", "price_pro_test", base))
	r := e.waitEvent(created)
	if r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "stale") {
		t.Fatalf("late created: %+v %s, want ignored as stale", r, deref(r.Reason))
	}
	if e.tenantPlan(tenant) != "team" || e.sub(sub).Status != "active" {
		t.Fatalf("plan %s status %s, want team active", e.tenantPlan(tenant), e.sub(sub).Status)
	}

	// A created event in the same second as the updated one is older too.
	sub2 := sub + "b"
	upd2 := newEventID(t)
	e.post(subEvent(t, "customer.subscription.updated", upd2, cus, sub2, "active", "price_team_test", base))
	e.waitEvent(upd2)
	cr2 := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", cr2, cus, sub2, "incomplete", "price_pro_test", base))
	if r := e.waitEvent(cr2); r.Status != billing.StatusIgnored {
		t.Fatalf("same-second created after updated: %+v", r)
	}
}

func TestDeletedIsNeverRevivedByALateUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus, sub := newCustomer(), "sub_dead_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute)

	for i, ev := range []struct{ typ, status string }{{"customer.subscription.created", "active"}, {"customer.subscription.deleted", "canceled"}} {
		id := newEventID(t)
		e.post(subEvent(t, ev.typ, id, cus, sub, ev.status, "price_pro_test", base.Add(time.Duration(i*10)*time.Second)))
		e.waitEvent(id)
	}
	v := e.version(tenant)
	// Older than the deletion, then (as Stripe's clock may skew) newer.
	for _, at := range []time.Time{base.Add(5 * time.Second), base.Add(30 * time.Second)} {
		id := newEventID(t)
		e.post(subEvent(t, "customer.subscription.updated", id, cus, sub, "active", "price_pro_test", at))
		if r := e.waitEvent(id); r.Status != billing.StatusIgnored {
			t.Fatalf("late updated{active} at %s: %+v, want ignored", at, r)
		}
	}
	if s := e.sub(sub); s.Status != "canceled" || e.snapshot(tenant).Plan != "free" || e.version(tenant) != v {
		t.Fatalf("revived: status %s plan %s version %d→%d", s.Status, e.snapshot(tenant).Plan, v, e.version(tenant))
	}
}

// The same event ten times at once to two api instances: one row, one job,
// one entitlement version.
func TestDuplicateDeliveriesToTwoInstancesHaveOneEffect(t *testing.T) {
	t.Parallel()
	a := newEnv(t, envOpts{})
	b := newEnvOn(t, a.pool, a.rdb, a.prefix, envOpts{})
	a.plans()
	cus, sub := newCustomer(), "sub_dup_"+newCustomer()
	tenant := a.tenant("free", cus)
	v0 := a.version(tenant)
	id := newEventID(t)
	body := subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", time.Now())

	var wg sync.WaitGroup
	statuses := make([]int, 10)
	dups := make([]bool, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := a
			if i%2 == 1 {
				target = b
			}
			r := target.post(body)
			statuses[i] = r.Status
			dups[i], _ = r.Body["duplicate"].(bool)
		}()
	}
	wg.Wait()
	firsts := 0
	for i, st := range statuses {
		if st != http.StatusOK {
			t.Fatalf("delivery %d: status %d", i, st)
		}
		if !dups[i] {
			firsts++
		}
	}
	if firsts != 1 {
		t.Fatalf("%d deliveries were stored as new, want exactly 1", firsts)
	}
	a.waitEvent(id)
	var rows, jobsN int
	ctx := context.Background()
	_ = a.pool.QueryRow(ctx, `SELECT count(*) FROM stripe_events WHERE id = $1`, id).Scan(&rows)
	_ = a.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'stripe_event' AND args->>'event_id' = $1`, id).Scan(&jobsN)
	if rows != 1 || jobsN != 1 {
		t.Fatalf("rows %d jobs %d, want 1 and 1", rows, jobsN)
	}
	var queue string
	var maxAttempts int
	_ = a.pool.QueryRow(ctx, `SELECT queue, max_attempts FROM river_job WHERE args->>'event_id' = $1`, id).Scan(&queue, &maxAttempts)
	if queue != "stripe" || maxAttempts != billing.MaxAttempts {
		t.Fatalf("job on queue %q with max_attempts %d, want stripe and %d", queue, maxAttempts, billing.MaxAttempts)
	}
	if v := a.version(tenant); v != v0+1 {
		t.Fatalf("version %d, want %d (one effect)", v, v0+1)
	}
	var versions int
	_ = a.pool.QueryRow(ctx, `SELECT count(*) FROM entitlement_versions WHERE tenant_id = $1 AND reason LIKE '%' || $2`, tenant, id).Scan(&versions)
	if versions != 1 {
		t.Fatalf("%d entitlement versions name the event, want 1", versions)
	}
}

func TestUnknownTypeAndCustomerAreIgnoredAndShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	unknownType := newEventID(t)
	body := fixture(t, "real/customer.created.json", unknownType, time.Now(), nil)
	if r := e.post(body); r.Status != http.StatusOK {
		t.Fatalf("unknown type: %d %s", r.Status, r.Raw)
	}
	if r := e.waitEvent(unknownType); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "not handled") {
		t.Fatalf("unknown type: %+v %s", r, deref(r.Reason))
	}

	unknownCus := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", unknownCus, "cus_nobody_"+newCustomer(), "sub_x_"+newCustomer(), "active", "price_pro_test", time.Now()))
	r := e.waitEvent(unknownCus)
	if r.Status != billing.StatusIgnored || !strings.HasPrefix(deref(r.Reason), "unknown customer") {
		t.Fatalf("unknown customer: %+v %s", r, deref(r.Reason))
	}
	list := e.admin(http.MethodGet, "/admin/v1/stripe/events?status=ignored&limit=200", nil)
	if list.Status != http.StatusOK || !strings.Contains(list.Raw, unknownCus) || !strings.Contains(list.Raw, "unknown customer") {
		t.Fatalf("admin list of ignored: %d %s", list.Status, list.Raw)
	}

	// An unmapped price is ignored with a reason naming it.
	cus := newCustomer()
	e.tenant("free", cus)
	unmapped := newEventID(t)
	e.post(subEvent(t, "customer.subscription.created", unmapped, cus, "sub_u_"+cus, "active", "price_nobody_maps", time.Now()))
	if r := e.waitEvent(unmapped); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "price_nobody_maps") {
		t.Fatalf("unmapped price: %+v %s", r, deref(r.Reason))
	}
	pr := newEventID(t)
	e.post(fixture(t, "real/price.updated.json", pr, time.Now(), nil))
	if r := e.waitEvent(pr); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "not mapped to a plan") {
		t.Fatalf("price.updated unmapped: %+v %s", r, deref(r.Reason))
	}
	prod := newEventID(t)
	e.post(fixture(t, "real/product.updated.json", prod, time.Now(), nil))
	if r := e.waitEvent(prod); r.Status != billing.StatusProcessed {
		t.Fatalf("product.updated: %+v", r)
	}
}

// A subscription event posted to one api instance changes what the limiter
// of another instance enforces within two seconds of the 2xx.
func TestSubscriptionChangeReachesAnotherInstancesLimiterWithin2s(t *testing.T) {
	t.Parallel()
	a := newEnv(t, envOpts{})
	b := newEnvOn(t, a.pool, a.rdb, a.prefix, envOpts{noWorker: true})
	a.plans()
	cus, sub := newCustomer(), "sub_x2_"+newCustomer()
	tenant := a.tenant("free", cus)
	base := time.Now().Add(-time.Minute)
	id := newEventID(t)
	a.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", base))
	a.waitEvent(id)
	key, err := a.keys.IssueKey(context.Background(), tenant, "test")
	if err != nil {
		t.Fatal(err)
	}
	seen := func() (string, string) {
		r := do(t, http.MethodGet, b.srv.URL+"/v1/entitlements", key.Key, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET /v1/entitlements on b: %d %s", r.Status, r.Raw)
		}
		plan, _ := r.Body["plan"].(string)
		return plan, r.Header.Get("RateLimit-Policy")
	}
	if plan, policy := seen(); plan != "pro" || !strings.Contains(policy, "q=50;") {
		t.Fatalf("before: plan %s policy %q, want pro with q=50", plan, policy)
	}
	up := newEventID(t)
	r := a.post(subEvent(t, "customer.subscription.updated", up, cus, sub, "active", "price_team_test", base.Add(time.Second)))
	acked := time.Now()
	if r.Status != http.StatusOK {
		t.Fatalf("post: %d", r.Status)
	}
	for {
		plan, policy := seen()
		if plan == "team" && strings.Contains(policy, "q=500;") {
			t.Logf("b enforces team %s after the 2xx", time.Since(acked))
			break
		}
		if time.Since(acked) > 2*time.Second {
			t.Fatalf("b still sees plan %s policy %q 2s after the 2xx", plan, policy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMetricsCountWebhooksProcessingAndLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus := newCustomer()
	e.tenant("free", cus)
	id := newEventID(t)
	body := subEvent(t, "customer.subscription.created", id, cus, "sub_m_"+cus, "active", "price_pro_test", time.Now())
	e.post(body)
	e.post(body)
	e.postSigned(body, "t=1,v1=00")
	e.waitEvent(id)
	want := map[string]float64{
		`tollgate_stripe_webhook_events_total{outcome="stored",type="customer.subscription.created"}`:     1,
		`tollgate_stripe_webhook_events_total{outcome="duplicate",type="customer.subscription.created"}`:  1,
		`tollgate_stripe_webhook_events_total{outcome="rejected",type="unknown"}`:                         1,
		`tollgate_stripe_events_processed_total{status="processed",type="customer.subscription.created"}`: 1,
	}
	got := map[string]float64{}
	lagCount := uint64(0)
	gather := func() {
		families, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got, lagCount = map[string]float64{}, 0
		for _, f := range families {
			for _, m := range f.GetMetric() {
				name := f.GetName() + "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						name += ","
					}
					name += l.GetName() + "=\"" + l.GetValue() + "\""
				}
				name += "}"
				if m.GetCounter() != nil {
					got[name] = m.GetCounter().GetValue()
				}
				if m.GetGauge() != nil {
					got[name] = m.GetGauge().GetValue()
				}
				if f.GetName() == "tollgate_stripe_event_processing_lag_seconds" {
					lagCount = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	// The worker counts just after it commits, the lag before the outcome:
	// poll until both are in (a clean-clone run read between the two).
	processed := `tollgate_stripe_events_processed_total{status="processed",type="customer.subscription.created"}`
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		gather()
		if (lagCount == 1 && got[processed] == 1) || time.Now().After(deadline) {
			break
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	// The backlog read from Postgres at scrape time (the package's database
	// is shared by its tests, so at least this test's event).
	if got[`tollgate_stripe_events{status="processed"}`] < 1 {
		t.Errorf("tollgate_stripe_events{processed} = %v", got[`tollgate_stripe_events{status="processed"}`])
	}
	if _, ok := got[`tollgate_stripe_oldest_pending_event_age_seconds{}`]; !ok {
		t.Errorf("no oldest pending age gauge: %v", got)
	}
	if lagCount != 1 {
		t.Errorf("lag histogram has %d samples, want 1", lagCount)
	}
}
