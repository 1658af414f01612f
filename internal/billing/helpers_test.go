package billing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// stripe-mock dies with the test binary (see stripemock), so pgtest.Main,
// which exits, can be the whole TestMain.
func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	secret     = "whsec_test_current_secret"
	prevSecret = "whsec_test_previous_secret"
	adminToken = "tga_test_admin"
	fixtures   = "testdata/stripe/events"
)

var evtSeq atomic.Int64

// newEventID gives every test its own event ids (fixtures repeat theirs).
func newEventID(t testing.TB) string {
	return fmt.Sprintf("evt_test_%d_%d", time.Now().UnixNano(), evtSeq.Add(1))
}

type envOpts struct {
	prevSecret  string
	stripeBase  string
	grace       time.Duration
	beforeApply func(ctx context.Context, eventID string) error
	noWorker    bool
	noSecret    bool
	proration   string
	credits     bool // top-ups: billing grants them through a credits service (env.creds)
}

// env is one api instance (server, services) plus, unless noWorker, a
// worker running billing's River workers, on the package's database.
type env struct {
	t      testing.TB
	pool   *pgxpool.Pool
	dbURL  string // pool's database, for processes the test starts
	rdb    *redis.Client
	prefix string
	ents   *entitlements.Service
	cat    *catalogue.Service
	keys   *credentials.Service
	svc    *billing.Service
	srv    *httptest.Server
	worker *river.Client[pgx.Tx]
	reg    *prometheus.Registry
	creds  *credits.Service
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	// A database of its own: the env's River worker takes any job of its
	// database, so envs of parallel tests must not share one.
	pool, dbURL := pgtest.Isolated(t)
	rdb, prefix := redistest.New(t)
	e := newEnvOn(t, pool, rdb, prefix, o)
	e.dbURL = dbURL
	return e
}

func newEnvOn(t testing.TB, pool *pgxpool.Pool, rdb *redis.Client, prefix string, o envOpts) *env {
	t.Helper()
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(pool, store, nil, entitlements.Options{DefaultPlan: "free"})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	inserter, err := jobs.NewInsertClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	bo := billing.Options{WebhookSecret: secret, WebhookSecretPrevious: o.prevSecret, GracePeriod: o.grace,
		BeforeApply: o.beforeApply, Registerer: reg, Proration: o.proration}
	if o.noSecret {
		bo.WebhookSecret = ""
	}
	var creds *credits.Service
	if o.credits {
		// Grants are written to Redis (the limiter draws them there).
		creds = credits.NewService(pool, ents, cat, nil, credits.Options{Grants: store})
		bo.Credits = creds
	}
	if o.stripeBase != "" {
		bo.SecretKey, bo.APIBase, bo.StripeTimeout = "sk_test_123", o.stripeBase, 5*time.Second
	}
	svc, err := billing.New(pool, ents, cat, inserter, nil, bo)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Loader: ents.ReloadSnapshot,
		Timeout: 5 * time.Second}) // not a fail-mode test: no 50 ms fallbacks under load
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	keys := credentials.New(pool, ents, nil, credentials.Options{})
	srv, err := httpapi.NewServer(httpapi.Deps{DB: pool, Redis: rdb, AdminToken: adminToken, Entitlements: ents, Catalogue: cat, Credentials: keys,
		PlanChanger: svc, Limiter: lim, Billing: svc})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	e := &env{t: t, pool: pool, rdb: rdb, prefix: prefix, ents: ents, cat: cat, keys: keys, svc: svc, srv: ts, reg: reg, creds: creds}
	if !o.noWorker {
		e.startWorker()
	}
	return e
}

// startWorker starts a River client working billing's jobs.
func (e *env) startWorker() *river.Client[pgx.Tx] {
	e.t.Helper()
	workers := river.NewWorkers()
	e.svc.Workers(workers)
	w, err := jobs.NewWorkerClient(e.pool, nil, jobs.Config{Workers: workers, FetchPoll: 20 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.StopAndCancel(ctx)
	})
	e.worker = w
	return w
}

// plan creates a plan with a rate burst that identifies it in headers.
func (e *env) plan(key, price string, burst int64, features ...string) {
	e.t.Helper()
	ps := float64(burst)
	in := catalogue.PlanInput{Key: key, Name: key, StripePriceID: price,
		Rate: &catalogue.RateInput{PerSecond: &ps, Burst: &burst}, Features: features}
	if _, err := e.cat.CreatePlan(context.Background(), in); err != nil {
		e.t.Fatalf("create plan %s: %v", key, err)
	}
}

// plans creates free, pro and team (idempotent per package database).
func (e *env) plans() {
	e.t.Helper()
	for _, p := range []struct {
		key, price string
		burst      int64
	}{{"free", "", 5}, {"pro", "price_pro_test", 50}, {"team", "price_team_test", 500}} {
		if _, err := e.cat.GetPlan(context.Background(), p.key); err == nil {
			continue
		}
		e.plan(p.key, p.price, p.burst)
	}
}

func (e *env) tenant(plan, customer string) string {
	e.t.Helper()
	tn, err := e.ents.CreateTenant(context.Background(), entitlements.TenantInput{Name: "t-" + customer, Plan: plan, StripeCustomerID: customer})
	if err != nil {
		e.t.Fatalf("create tenant: %v", err)
	}
	return tn.ID
}

// newCustomer is a customer id no other test uses.
func newCustomer() string { return fmt.Sprintf("cus_t%d%d", time.Now().UnixNano(), evtSeq.Add(1)) }

// fixture loads an event fixture and gives it our id, API version and
// created time; mutate edits data.object.
func fixture(t testing.TB, name, id string, created time.Time, mutate func(o map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	ev["id"], ev["api_version"], ev["created"] = id, "2024-06-20", created.Unix()
	obj := ev["data"].(map[string]any)["object"].(map[string]any)
	if mutate != nil {
		mutate(obj)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// subEvent is a subscription event for customer/sub with a status and price.
func subEvent(t testing.TB, typ, id, customer, sub, status, price string, created time.Time) []byte {
	t.Helper()
	b := fixture(t, "derived/customer.subscription.updated.plan-upgrade.json", id, created, func(o map[string]any) {
		o["id"], o["customer"], o["status"] = sub, customer, status
		o["latest_invoice"] = "in_" + sub
		item := o["items"].(map[string]any)["data"].([]any)[0].(map[string]any)
		item["id"] = "si_" + sub
		item["price"].(map[string]any)["id"] = price
		o["current_period_start"] = created.Add(-time.Hour).Unix()
		o["current_period_end"] = created.Add(-time.Hour).AddDate(0, 1, 0).Unix()
	})
	var ev map[string]any
	_ = json.Unmarshal(b, &ev)
	ev["type"] = typ
	delete(ev["data"].(map[string]any), "previous_attributes")
	out, _ := json.Marshal(ev)
	return out
}

func sign(body []byte, sec string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: sec, Timestamp: at}).Header
}

type response struct {
	Status int
	Body   map[string]any
	Raw    string
	Header http.Header
}

func do(t testing.TB, method, url, auth string, body []byte, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{Status: resp.StatusCode, Raw: string(raw), Header: resp.Header}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

// post signs body with the current secret now and posts it.
func (e *env) post(body []byte) response {
	e.t.Helper()
	return e.postSigned(body, sign(body, secret, time.Now()))
}

func (e *env) postSigned(body []byte, sig string) response {
	e.t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if sig != "" {
		h["Stripe-Signature"] = sig
	}
	return do(e.t, http.MethodPost, e.srv.URL+"/webhooks/stripe", "", body, h)
}

func (e *env) admin(method, path string, body []byte) response {
	e.t.Helper()
	return do(e.t, method, e.srv.URL+path, adminToken, body, map[string]string{"Content-Type": "application/json"})
}

// eventRow is the stored state of an event.
type eventRow struct {
	Status   string
	Reason   *string
	Attempts int
	LastErr  *string
}

func (e *env) event(id string) eventRow {
	e.t.Helper()
	var r eventRow
	err := e.pool.QueryRow(context.Background(), `SELECT status, ignored_reason, attempts, last_error FROM stripe_events WHERE id = $1`, id).
		Scan(&r.Status, &r.Reason, &r.Attempts, &r.LastErr)
	if err != nil {
		e.t.Fatalf("event %s: %v", id, err)
	}
	return r
}

// waitEvent polls until the event leaves pending; on failure the log
// shows the event as it last was (attempts, last error).
func (e *env) waitEvent(id string) eventRow {
	e.t.Helper()
	var r eventRow
	e.t.Cleanup(func() {
		if e.t.Failed() && r.Status == billing.StatusPending {
			e.t.Logf("event %s last seen pending: attempts %d, last error %v", id, r.Attempts, deref(r.LastErr))
		}
	})
	testkit.Eventually(e.t, 30*time.Second, "event "+id+" leaves pending", func() bool {
		r = e.event(id)
		return r.Status != billing.StatusPending
	})
	return r
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// version is the tenant's entitlement version.
func (e *env) version(tenant string) int64 {
	e.t.Helper()
	var v int64
	if err := e.pool.QueryRow(context.Background(), `SELECT entitlement_version FROM tenants WHERE id = $1`, tenant).Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) snapshot(tenant string) limiter.Snapshot {
	e.t.Helper()
	snap, err := e.ents.SnapshotFromPostgres(context.Background(), tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	return snap
}

type subState struct {
	Status      string
	Price       *string
	GraceEndsAt *time.Time
	Attempts    int
	PeriodStart *time.Time
}

func (e *env) sub(id string) subState {
	e.t.Helper()
	var s subState
	err := e.pool.QueryRow(context.Background(), `SELECT status, stripe_price_id, grace_ends_at, payment_attempts, current_period_start FROM subscriptions WHERE id = $1`, id).
		Scan(&s.Status, &s.Price, &s.GraceEndsAt, &s.Attempts, &s.PeriodStart)
	if err != nil {
		e.t.Fatalf("subscription %s: %v", id, err)
	}
	return s
}

func (e *env) tenantPlan(id string) string {
	e.t.Helper()
	var p string
	if err := e.pool.QueryRow(context.Background(), `SELECT plan_key FROM tenants WHERE id = $1`, id).Scan(&p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// withPeriod sets the subscription's current period to start at start.
func withPeriod(t testing.TB, body []byte, start time.Time) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatal(err)
	}
	o := ev["data"].(map[string]any)["object"].(map[string]any)
	o["current_period_start"], o["current_period_end"] = start.Unix(), start.AddDate(0, 1, 0).Unix()
	out, _ := json.Marshal(ev)
	return out
}
