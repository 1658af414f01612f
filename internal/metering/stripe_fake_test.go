package metering

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// fakeStripe is a local Stripe for what stripe-mock cannot do: it keeps
// the meter events it accepted, answers a repeated identifier the way
// Stripe does (400 invalid_request_error "An event already exists with
// identifier …"), can be slow, and records how many sends overlapped.
// sent is the sum of the accepted events of meter event name for customer.
func (f *fakeStripe) sent(name, customer string) (n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if e.name == name && e.customer == customer {
			n += e.value
		}
	}
	return n
}

type fakeStripe struct {
	srv   *httptest.Server
	delay time.Duration

	mu       sync.Mutex
	events   map[string]fakeEvent // identifier → first accepted event
	requests map[string]int       // identifier → requests
	starts   []time.Time
	inFlight int
	maxIn    int
}

type fakeEvent struct {
	name, customer string
	value          int64
	timestamp      time.Time
}

func newFakeStripe(t *testing.T) *fakeStripe {
	f := &fakeStripe{events: map[string]fakeEvent{}, requests: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/billing/meter_events" {
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"Unrecognized request URL"}}`, http.StatusNotFound)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.PostForm.Get("identifier")
	f.mu.Lock()
	f.requests[id]++
	f.starts = append(f.starts, time.Now())
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	f.mu.Unlock()
	time.Sleep(f.delay) // a slow Stripe, so that overlapping sends overlap
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	w.Header().Set("Content-Type", "application/json")
	if _, ok := f.events[id]; ok {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"An event already exists with identifier %s.","request_log_url":"https://dashboard.stripe.com/test/logs/req_x","type":"invalid_request_error"}}`, id)
		return
	}
	v, _ := strconv.ParseInt(r.PostForm.Get("payload[value]"), 10, 64)
	ts, _ := strconv.ParseInt(r.PostForm.Get("timestamp"), 10, 64)
	f.events[id] = fakeEvent{name: r.PostForm.Get("event_name"), customer: r.PostForm.Get("payload[stripe_customer_id]"), value: v, timestamp: time.Unix(ts, 0)}
	fmt.Fprintf(w, `{"object":"billing.meter_event","created":%d,"event_name":%q,"identifier":%q,"livemode":false,"payload":{},"timestamp":%d}`,
		time.Now().Unix(), r.PostForm.Get("event_name"), id, ts)
}

func (f *fakeStripe) sender() MeterSender { return NewStripeMeterSender("sk_test_fake", f.srv.URL) }

// meteredTenant makes a plan whose quotas are given as meter → (limit,
// stripe_report) with a Stripe meter each, and a tenant on it linked to a
// Stripe customer, anchored at anchor.
func (b *bundle) meteredTenant(t *testing.T, anchor time.Time, quotas map[string]struct {
	limit int64
	kind  string
}) (tenant, customer string) {
	t.Helper()
	plan := "p" + randHex(6)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO plans (key, name) VALUES ($1, $1)`, plan); err != nil {
		t.Fatal(err)
	}
	for m, q := range quotas {
		if _, err := b.db.Exec(b.ctx, `INSERT INTO plan_quotas (plan_key, meter, quota_limit, mode, stripe_meter_event, stripe_report) VALUES ($1, $2, $3, 'soft', $4, $5)`,
			plan, m, q.limit, "tg_"+m, q.kind); err != nil {
			t.Fatal(err)
		}
	}
	customer = "cus_" + randHex(6)
	if err := b.db.QueryRow(b.ctx, `INSERT INTO tenants (name, plan_key, stripe_customer_id, period_anchor) VALUES ('m', $1, $2, $3) RETURNING id`,
		plan, customer, anchor).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	return tenant, customer
}

type quotaSpec = struct {
	limit int64
	kind  string
}

// withSnapshots is the bundle's service with a snapshot function that
// gives each tenant the quotas in limits (the entitlement, which may
// differ from the plan's: overrides, add-ons).
func (b *bundle) withSnapshots(t *testing.T, opts Options, limits map[string]map[string]int64) *Service {
	opts.Snapshot = func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
		qs := map[string]limiter.Quota{}
		for m, l := range limits[tenant] {
			qs[m] = limiter.Quota{Limit: l, Mode: limiter.ModeSoft}
		}
		return limiter.Snapshot{TenantID: tenant, Quotas: qs}, nil
	}
	return NewService(b.db, b.store, testLog(t), opts)
}

func (b *bundle) reportRows(t *testing.T, tenant, meter string) (rows []struct {
	qty        int64
	status     string
	late       bool
	eventTime  *time.Time
	lastError  *string
	attempts   int
	identifier string
}) {
	t.Helper()
	rs, err := b.db.Query(b.ctx, `SELECT quantity, status, late, event_time, last_error, attempts, identifier FROM stripe_meter_reports
 WHERE tenant_id = $1 AND meter = $2 ORDER BY created_at, identifier`, tenant, meter)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var r struct {
			qty        int64
			status     string
			late       bool
			eventTime  *time.Time
			lastError  *string
			attempts   int
			identifier string
		}
		if err := rs.Scan(&r.qty, &r.status, &r.late, &r.eventTime, &r.lastError, &r.attempts, &r.identifier); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// By default a meter is sent the overage above the tenant's included quota
// (the entitlement's limit, here raised above the plan's by an override),
// as cumulative deltas; usage under the quota sends nothing; a quota with
// stripe_report "total" sends all usage.
func TestReportOverage(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	tenant, customer := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{
		"tokens": {100, "overage"}, "exports": {50, "overage"}, "seats": {10, "total"}})
	svc := b.withSnapshots(t, Options{}, map[string]map[string]int64{tenant: {"tokens": 120, "exports": 50, "seats": 10}})
	now := time.Now()
	if _, err := svc.Ingest(b.ctx, tenant, []Event{ev("t1", "tokens", 150, now), ev("e1", "exports", 40, now), ev("s1", "seats", 7, now)}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ReportToStripe(b.ctx, fake.sender()); err != nil {
		t.Fatal(err)
	}
	sum := func(name string) int64 { return fake.sent(name, customer) }
	if got := sum("tg_tokens"); got != 30 {
		t.Fatalf("tokens overage sent = %d, want 30 (150 used, 120 included)", got)
	}
	if got := sum("tg_exports"); got != 0 {
		t.Fatalf("exports sent = %d, want 0 (40 used of 50 included)", got)
	}
	if got := sum("tg_seats"); got != 7 {
		t.Fatalf("seats sent = %d, want the total 7", got)
	}
	if _, err := svc.Ingest(b.ctx, tenant, []Event{ev("t2", "tokens", 20, now), ev("e2", "exports", 15, now)}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ReportToStripe(b.ctx, fake.sender()); err != nil {
		t.Fatal(err)
	}
	if got, ex := sum("tg_tokens"), sum("tg_exports"); got != 50 || ex != 5 {
		t.Fatalf("after more usage: tokens %d (want 50), exports %d (want 5)", got, ex)
	}
	if rs := b.reportRows(t, tenant, "tokens"); len(rs) != 2 || rs[0].qty != 30 || rs[1].qty != 20 {
		t.Fatalf("tokens reports %+v, want deltas 30 then 20", rs)
	}
}

// Stripe answers a repeated identifier (an earlier send got through but
// its answer was lost) with 400 "An event already exists with identifier":
// the report is sent, not failed and retried for a day.
func TestReportDuplicateIdentifierCountsAsSent(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	tenant, _ := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{"tokens": {0, "total"}})
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("t1", "tokens", 9, time.Now())}); err != nil {
		t.Fatal(err)
	}
	// A pass that crashed after Stripe recorded the event: the row is
	// pending, and Stripe has the identifier.
	boom := &recordingSender{next: fake.sender()}
	if _, err := b.svc.ReportToStripe(b.ctx, boom); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `UPDATE stripe_meter_reports SET status = 'pending', sent_at = NULL, attempts = 0 WHERE tenant_id = $1`, tenant); err != nil {
		t.Fatal(err)
	}
	st, err := b.svc.ReportToStripe(b.ctx, fake.sender())
	if err != nil {
		t.Fatal(err)
	}
	rs := b.reportRows(t, tenant, "tokens")
	if len(rs) != 1 || rs[0].status != "sent" || rs[0].attempts != 1 || st.Duplicate != 1 || st.Failed != 0 {
		t.Fatalf("reports %+v, stats %+v: want the duplicate counted as sent", rs, st)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.requests[rs[0].identifier] != 2 || len(fake.events) != 1 {
		t.Fatalf("stripe saw %d requests for %s and keeps %d events", fake.requests[rs[0].identifier], rs[0].identifier, len(fake.events))
	}
}

// Reporters at once (overlapping periodic jobs, several workers) send
// each report exactly once.
func TestConcurrentReportersSendEachReportOnce(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	fake.delay = 30 * time.Millisecond
	const tenants = 24
	var mine []string
	for i := 0; i < tenants; i++ {
		tenant, _ := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{"tokens": {0, "total"}})
		mine = append(mine, tenant)
		if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("t", "tokens", int64(i+1), time.Now())}); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{ReportRate: 1000}
	reporters := []*Service{NewService(b.db, b.store, testLog(t), opts), NewService(b.db, b.store, testLog(t), opts), NewService(b.db, b.store, testLog(t), opts)}
	var wg sync.WaitGroup
	errs := make(chan error, len(reporters))
	for _, r := range reporters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.ReportToStripe(b.ctx, fake.sender())
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A last pass picks up anything a reporter skipped while another held
	// the recording lock.
	if _, err := reporters[0].ReportToStripe(b.ctx, fake.sender()); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for id, n := range fake.requests {
		if n != 1 {
			t.Errorf("identifier %s sent %d times", id, n)
		}
	}
	if len(fake.events) < tenants { // other tests' leftovers may add some
		t.Fatalf("stripe has %d events, want %d", len(fake.events), tenants)
	}
	if c := b.count(t, `SELECT count(*) FROM stripe_meter_reports WHERE tenant_id = ANY($1::uuid[]) AND status = 'sent'`, mine); c != tenants {
		t.Fatalf("%d reports sent, want %d", c, tenants)
	}
}

// Senders racing over the same unsent reports (a pass whose lock was
// lost, a future second sender) claim them FOR UPDATE SKIP LOCKED with a
// lease: each report goes to Stripe once.
func TestClaimsSendEachReportOnce(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	fake.delay = 30 * time.Millisecond
	const tenants = 24
	var mine []string
	for i := 0; i < tenants; i++ {
		tenant, _ := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{"tokens": {0, "total"}})
		mine = append(mine, tenant)
		if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("t", "tokens", int64(i+1), time.Now())}); err != nil {
			t.Fatal(err)
		}
	}
	var st ReportStats
	if err := b.svc.recordReports(b.ctx, &st); err != nil || st.Created < tenants {
		t.Fatalf("recorded %+v, %v", st, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		svc := NewService(b.db, b.store, testLog(t), Options{ReportRate: 1000})
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st ReportStats
			errs <- svc.sendReports(b.ctx, fake.sender(), &st)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for id, n := range fake.requests {
		if n != 1 {
			t.Errorf("identifier %s sent %d times", id, n)
		}
	}
	if c := b.count(t, `SELECT count(*) FROM stripe_meter_reports WHERE tenant_id = ANY($1::uuid[]) AND status = 'sent'`, mine); c != tenants {
		t.Fatalf("%d reports sent, want %d", c, tenants)
	}
}

// While another pass holds the pass lock (another worker), a pass does
// nothing and says so; once it is released, the next pass reports.
func TestReportPassIsOneAtATime(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	tenant, _ := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{"tokens": {0, "total"}})
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("t", "tokens", 3, time.Now())}); err != nil {
		t.Fatal(err)
	}
	release, ok, err := b.svc.passLock(b.ctx)
	if err != nil || !ok {
		t.Fatalf("pass lock: %v %v", ok, err)
	}
	var once sync.Once
	defer once.Do(release) // a failed check must not leave the connection out of the pool
	st, err := NewService(b.db, b.store, testLog(t), Options{}).ReportToStripe(b.ctx, fake.sender())
	if err != nil || !st.Busy || st.Created != 0 || st.Sent != 0 {
		t.Fatalf("pass while another runs: %+v, %v; want busy, nothing done", st, err)
	}
	once.Do(release)
	st, err = NewService(b.db, b.store, testLog(t), Options{}).ReportToStripe(b.ctx, fake.sender())
	if err != nil || st.Busy || len(b.reportRows(t, tenant, "tokens")) != 1 {
		t.Fatalf("pass after release: %+v, %v", st, err)
	}
}

// Sends go out in parallel, yet never faster than ReportRate.
func TestReportsSendInParallelWithinRate(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	fake.delay = 150 * time.Millisecond
	const n = 40
	for i := 0; i < n; i++ {
		tenant, _ := b.meteredTenant(t, time.Now().Add(-24*time.Hour), map[string]quotaSpec{"tokens": {0, "total"}})
		if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("t", "tokens", 1, time.Now())}); err != nil {
			t.Fatal(err)
		}
	}
	svc := NewService(b.db, b.store, testLog(t), Options{ReportRate: 20, ReportConcurrency: 8})
	began := time.Now()
	st, err := svc.ReportToStripe(b.ctx, fake.sender())
	took := time.Since(began)
	if err != nil || st.Sent < n { // other tests' failed reports may be sent too
		t.Fatalf("stats %+v, %v: want %d sent", st, err, n)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	t.Logf("%d sends to a Stripe answering in %s: %s (one at a time: %s), at most %d in flight",
		st.Sent, fake.delay, took.Round(time.Millisecond), time.Duration(st.Sent)*fake.delay, fake.maxIn)
	if fake.maxIn < 2 || fake.maxIn > 8 {
		t.Fatalf("at most %d sends in flight, want 2..8 (parallel, capped)", fake.maxIn)
	}
	// Any one second holds at most the rate plus the limiter's burst.
	for i := range fake.starts {
		k := 0
		for _, s := range fake.starts[i:] {
			if s.Sub(fake.starts[i]) < time.Second {
				k++
			}
		}
		if k > 20+5 {
			t.Fatalf("%d sends within one second, over the rate of 20/s", k)
		}
	}
}

// Usage that arrives after its period's invoice window (Stripe's grace
// after the period end) is timestamped now, billed in the current period
// and marked late; usage of a period still inside the grace is timestamped
// in its period.
func TestLateUsageBilledInCurrentPeriod(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	b := setup(t)
	fake := newFakeStripe(t)
	now := time.Now()
	lateTenant, _ := b.meteredTenant(t, now.Add(-2*time.Hour).AddDate(0, -1, 0), map[string]quotaSpec{"tokens": {0, "total"}})
	graceTenant, _ := b.meteredTenant(t, now.Add(-10*time.Minute).AddDate(0, -1, 0), map[string]quotaSpec{"tokens": {0, "total"}})
	// Both tenants' previous monthly period has ended (2 h and 10 min ago);
	// the usage happened in it and arrives now.
	if _, err := b.svc.Ingest(b.ctx, lateTenant, []Event{ev("old", "tokens", 5, now.Add(-3*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Ingest(b.ctx, graceTenant, []Event{ev("old", "tokens", 6, now.Add(-20*time.Minute))}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.ReportToStripe(b.ctx, fake.sender()); err != nil {
		t.Fatal(err)
	}
	late := b.reportRows(t, lateTenant, "tokens")
	if len(late) != 1 || !late[0].late || late[0].eventTime == nil || late[0].eventTime.Before(now.Add(-time.Second)) {
		t.Fatalf("late report %+v: want marked late and timestamped now (%s)", late, now)
	}
	inGrace := b.reportRows(t, graceTenant, "tokens")
	tp, _ := loadTenantPeriods(b.ctx, b.db, graceTenant)
	prev := tp.at(now.Add(-20 * time.Minute))
	if len(inGrace) != 1 || inGrace[0].late || inGrace[0].eventTime == nil || !inGrace[0].eventTime.Equal(prev.End.Add(-time.Second)) {
		t.Fatalf("in-grace report %+v: want not late, timestamped in its period ending %s", inGrace, prev.End)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for id, e := range fake.events {
		if id == late[0].identifier && e.timestamp.Before(now.Add(-time.Second)) {
			t.Fatalf("stripe got the late usage timestamped %s, inside a finalised invoice", e.timestamp)
		}
	}
}
