package rls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/rls"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const adminToken = "tga_rls_test_admin_token"

// instance is one api's rate limit service as cmd/api wires it: its own
// Redis client, entitlements service, credentials service (with the revocation subscription
// running), limiter and gRPC listener, on a shared database and prefix.
type instance struct {
	ents   *entitlements.Service
	cat    *catalogue.Service
	keys   *credentials.Service
	creds  *credits.Service // with setup.credits
	client rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
	reg    *prometheus.Registry
}

type setup struct {
	addr     string // Redis host:port; "" is the shared test Redis
	failMode limiter.FailMode
	timeout  time.Duration
	// credits wires grants as cmd/api does: written to Redis, drawn by the
	// limiter, and asked by CanGrow.
	credits bool
}

func newInstance(t *testing.T, pool *pgxpool.Pool, prefix string, set setup) *instance {
	t.Helper()
	if set.addr == "" {
		shared, _ := redistest.New(t)
		set.addr = shared.Options().Addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: set.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(pool, store, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	cred := credentials.New(pool, ents, nil, credentials.Options{Redis: rdb, Prefix: prefix})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = cred.Run(ctx) }()

	meter := metering.NewService(pool, store, nil, metering.Options{Snapshot: ents.CachedSnapshot})
	timeout := set.timeout
	if timeout == 0 {
		// As in httpapi's limit tests: the production 50 ms is the fail
		// modes' business; a loaded CI core must not turn a counting test
		// into a fallback test.
		timeout = 5 * time.Second
	}
	mode := set.failMode
	if mode == "" {
		mode = limiter.FailLocal
	}
	// The limiter has a client of its own, as cmd/api gives it: sharing one
	// with the credentials service's subscription raced inside go-redis's
	// first handshakes (it writes the shared options when the server lacks
	// maintenance notifications), which -race reported.
	limRDB := redis.NewClient(&redis.Options{Addr: set.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	lopts := limiter.Options{Prefix: prefix, Loader: ents.ReloadSnapshot, UsageLoader: meter.LoadUsage, ExternalLoader: ents.LoadExternal,
		Timeout: timeout, FailMode: limiter.FailModes{Rate: mode, Quota: mode, Concurrency: mode, Window: mode}}
	ropts := rls.Options{AdminToken: adminToken}
	var creds *credits.Service
	if set.credits {
		creds = credits.NewService(pool, ents, cat, nil, credits.Options{Grants: store})
		lopts.GrantLoader, ropts.CanGrow = creds.RedisGrants, creds.CanGrow
	}
	lim, err := limiter.New(limRDB, lopts)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ropts.Registerer = reg
	srv, err := rls.New(keys{Service: cred, cat: cat, lim: lim}, lim, ropts)
	if err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	serveDone := make(chan error, 1)
	go func() {
		serveDone <- rls.Serve(ctx, "127.0.0.1:0", srv, rls.ServeOptions{
			Probes:        []rls.Probe{func(ctx context.Context) error { return pool.Ping(ctx) }, func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
			ProbeInterval: 100 * time.Millisecond, Ready: func(a string) { addrc <- a },
		})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-serveDone:
		t.Fatalf("rls.Serve: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-serveDone; err != nil {
			t.Errorf("rls.Serve: %v", err)
		}
		lim.Close()
		limRDB.Close()
		rdb.Close() // ends Run's pub/sub read
		<-runDone
	})
	return &instance{ents: ents, cat: cat, keys: cred, creds: creds, client: rlsv3.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn), reg: reg}
}

type keys struct {
	*credentials.Service
	cat *catalogue.Service
	lim *limiter.Limiter
}

func (k keys) MeterDefined(ctx context.Context, meter string) (bool, error) {
	return k.cat.MeterDefined(ctx, meter)
}

func (k keys) TenantOfKey(ctx context.Context, raw string) (string, error) {
	info, err := k.AuthenticateKey(ctx, raw, false)
	return info.TenantID, err
}

func (k keys) TenantOfExternalID(ctx context.Context, ext string) (string, error) {
	return k.lim.ExternalTenant(ctx, ext)
}

var planSeq atomic.Int64

// tenantWithKey creates a plan (rate per second and burst, hard quota of
// requests), a tenant on it and an API key.
func tenantWithKey(t *testing.T, in *instance, perSecond float64, burst, quota int64) (tenantID, key string) {
	t.Helper()
	ctx := context.Background()
	planKey := fmt.Sprintf("rls_%d_%d", time.Now().UnixNano(), planSeq.Add(1))
	if _, err := in.cat.CreatePlan(ctx, catalogue.PlanInput{Key: planKey, Name: planKey,
		Rate:   &catalogue.RateInput{PerSecond: &perSecond, Burst: &burst},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &quota, Mode: "hard"}, "exports": {Limit: ptr(int64(5)), Mode: "hard"}},
	}); err != nil {
		t.Fatal(err)
	}
	ten, err := in.ents.CreateTenant(ctx, entitlements.TenantInput{Name: "rls " + planKey, Plan: planKey})
	if err != nil {
		t.Fatal(err)
	}
	k, err := in.keys.IssueKey(ctx, ten.ID, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	return ten.ID, k.Key
}

func ptr[T any](v T) *T { return &v }

func keyDescriptor(key string, extra ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "Bearer " + key}}}
	for i := 0; i+1 < len(extra); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: extra[i], Value: extra[i+1]})
	}
	return d
}

func ask(t *testing.T, in *instance, ctx context.Context, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := in.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "tollgate", Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v (an error lets Envoy pass the request by default)", err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if strings.EqualFold(h.Key, name) {
			return h.Value
		}
	}
	return ""
}

func TestHardQuotaIsExactAcrossTwoInstances(t *testing.T) {
	pool := pgtest.New(t)
	prefix := redistest.Prefix()
	a, b := newInstance(t, pool, prefix, setup{}), newInstance(t, pool, prefix, setup{})
	_, key := tenantWithKey(t, a, 10000, 10000, 30)

	var ok, over atomic.Int64
	var wg sync.WaitGroup
	for i := range 100 {
		in := a
		if i%2 == 1 {
			in = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := ask(t, in, context.Background(), 0, keyDescriptor(key))
			switch resp.OverallCode {
			case rlsv3.RateLimitResponse_OK:
				ok.Add(1)
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				over.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 30 || over.Load() != 70 {
		t.Fatalf("admitted %d and refused %d of 100 against a hard quota of 30 on two instances, want 30 and 70", ok.Load(), over.Load())
	}
}

func TestAnswersCarryLimitsAndHeaders(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	_, key := tenantWithKey(t, in, 1, 3, 1000)
	ctx := context.Background()

	resp := ask(t, in, ctx, 0, keyDescriptor(key))
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first request: %v", resp)
	}
	// The rate (3 of a burst of 3 → 2 left: 67%) is closer to refusing than
	// the quota (999 of 1000), so it is the one reported.
	if st.CurrentLimit.GetName() != "rate" || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND ||
		st.CurrentLimit.GetRequestsPerUnit() != 1 || st.LimitRemaining != 2 {
		t.Fatalf("current_limit %v, remaining %d: want the rate, 1 per SECOND, 2 left", st.CurrentLimit, st.LimitRemaining)
	}
	if got := header(resp, "ratelimit-policy"); !strings.Contains(got, `"rate";q=3;w=3`) || !strings.Contains(got, `"requests";q=1000`) {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := header(resp, "ratelimit"); !strings.Contains(got, `"rate";r=2`) || !strings.Contains(got, `"requests";r=999`) {
		t.Fatalf("RateLimit = %q", got)
	}
	if header(resp, "retry-after") != "" {
		t.Fatal("an admitted request carries Retry-After")
	}

	ask(t, in, ctx, 0, keyDescriptor(key))
	ask(t, in, ctx, 0, keyDescriptor(key))
	resp = ask(t, in, ctx, 0, keyDescriptor(key))
	st = resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth request within the burst of 3: %v", resp)
	}
	if st.CurrentLimit.GetName() != "rate" || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("refusal's status: %v", st)
	}
	if ra := header(resp, "retry-after"); ra == "" || ra == "0" {
		t.Fatalf("a refusal's Retry-After = %q", ra)
	}

	// A monthly quota is reported per MONTH.
	_, key2 := tenantWithKey(t, in, 1000, 1000, 10)
	resp = ask(t, in, ctx, 5, keyDescriptor(key2))
	st = resp.Statuses[0]
	if st.CurrentLimit.GetName() != "requests" || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH ||
		st.CurrentLimit.GetRequestsPerUnit() != 10 || st.LimitRemaining != 5 {
		t.Fatalf("quota status: %v", st)
	}
	if d := st.DurationUntilReset.AsDuration(); d < time.Hour || d > 32*24*time.Hour {
		t.Fatalf("duration_until_reset %s is not the rest of a month", d)
	}
}

func TestHitsAddendIsTheCostAndARefusedCostTakesNothing(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	_, key := tenantWithKey(t, in, 10000, 10000, 30)
	ctx := context.Background()
	for i := range 4 {
		if resp := ask(t, in, ctx, 7, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("cost 7, request %d of 4 (28 of 30): %v", i+1, resp)
		}
	}
	if resp := ask(t, in, ctx, 7, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("cost 7 with 2 left: %v", resp)
	}
	// The descriptor's own hits_addend wins over the request's: 2 fits.
	d := keyDescriptor(key)
	d.HitsAddend = wrapperspb.UInt64(2)
	resp := ask(t, in, ctx, 7, d)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("descriptor hits_addend 2 with 2 left (the refused 7 must have taken nothing): %v", resp)
	}
	if resp := ask(t, in, ctx, 0, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 31st unit was admitted: %v", resp)
	}
}

// With a credit grant of the meter, a cost over the hard quota's included
// units is drawn from it, and a refusal of what included and grants
// together cannot cover is an ordinary OVER_LIMIT: waiting for a grant or
// buying one lifts it, so no cost-exceeds-limit.
func TestACostOverIncludedUnitsWithGrantsIsNotImpossible(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{credits: true})
	tenant, key := tenantWithKey(t, in, 10000, 10000, 30)
	ctx := context.Background()
	amount := int64(100)
	if _, err := in.creds.Create(ctx, tenant, credits.GrantInput{Meter: "requests", Amount: &amount}); err != nil {
		t.Fatal(err)
	}
	if resp := ask(t, in, ctx, 31, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("cost 31 on a hard 30 with a grant of 100: %v", resp)
	}
	resp := ask(t, in, ctx, 200, keyDescriptor(key))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) == "cost-exceeds-limit" {
		t.Fatalf("cost 200 with 99 left of included and grant: %v (reason %q)", resp, header(resp, rls.ReasonHeader))
	}
}

func TestACostThePlanCanNeverAdmitIsRefusedWithoutRetryAfter(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	_, key := tenantWithKey(t, in, 10000, 10000, 30)
	resp := ask(t, in, context.Background(), 31, keyDescriptor(key))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("cost 31 on a hard 30: %v", resp)
	}
	if got := header(resp, rls.ReasonHeader); got != "cost-exceeds-limit" {
		t.Fatalf("%s = %q, want cost-exceeds-limit", rls.ReasonHeader, got)
	}
	if header(resp, "retry-after") != "" {
		t.Fatal("Retry-After on a cost no wait can admit")
	}
	resp = ask(t, in, context.Background(), 1001, keyDescriptor(key))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "invalid" {
		t.Fatalf("hits_addend 1001 (above /v1/check's 1000): %v", resp)
	}
}

func TestUnknownRevokedAndMissingCredentialsNeverPass(t *testing.T) {
	pool := pgtest.New(t)
	prefix := redistest.Prefix()
	a, b := newInstance(t, pool, prefix, setup{}), newInstance(t, pool, prefix, setup{})
	tenantID, key := tenantWithKey(t, a, 10000, 10000, 1000)
	ctx := context.Background()

	for name, d := range map[string]*ratelimitv3.RateLimitDescriptor{
		"unknown key":                       keyDescriptor("tg_" + strings.Repeat("x", len(key)-3)),
		"malformed key":                     keyDescriptor("not-a-key"),
		"no credential":                     {Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "api"}}},
		"tenant_id without a service token": {Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant_id", Value: tenantID}}},
	} {
		resp := ask(t, a, ctx, 0, d)
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("%s: %v, want OVER_LIMIT", name, resp.OverallCode)
		}
		if header(resp, rls.ReasonHeader) == "" {
			t.Errorf("%s: no %s header", name, rls.ReasonHeader)
		}
	}

	// Both instances know the key; revoked through a, b refuses it too.
	for _, in := range []*instance{a, b} {
		if resp := ask(t, in, ctx, 0, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("the live key: %v", resp)
		}
	}
	var keyID string
	if err := pool.QueryRow(ctx, `SELECT id::text FROM api_keys WHERE tenant_id = $1`, tenantID).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	if err := a.keys.RevokeKey(ctx, keyID); err != nil {
		t.Fatal(err)
	}
	if resp := ask(t, a, ctx, 0, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "invalid-api-key" {
		t.Fatalf("the revoking instance still answers %v", resp)
	}
	took := testkit.Eventually(t, 10*time.Second, "the other instance refuses the revoked key", func() bool {
		return ask(t, b, ctx, 0, keyDescriptor(key)).OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	})
	t.Logf("the other instance refused the revoked key after %s", took)
	if got := counter(t, a.reg, "tollgate_rls_descriptors_total"); got != 6 {
		t.Fatalf("tollgate_rls_descriptors_total = %v, want each of instance a's 6 answers counted once", got)
	}
}

func TestTenantIDNeedsAServiceToken(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	tenantID, _ := tenantWithKey(t, in, 10000, 10000, 1000)
	tok, err := in.keys.IssueServiceToken(context.Background(), "gateway")
	if err != nil {
		t.Fatal(err)
	}
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant_id", Value: tenantID}}}
	with := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	if resp := ask(t, in, with(tok.Token), 0, d); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with a service token: %v", resp)
	}
	if resp := ask(t, in, with(adminToken), 0, d); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with ADMIN_TOKEN: %v", resp)
	}
	resp := ask(t, in, with("tgs_made_up"), 0, d)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "invalid-service-token" {
		t.Fatalf("with a made-up token: %v", resp)
	}
	// A tenant's API key is no service credential.
	_, key := tenantWithKey(t, in, 10000, 10000, 1000)
	if resp := ask(t, in, with(key), 0, d); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("an API key as the service token: %v", resp)
	}
	if resp := ask(t, in, with(tok.Token), 0, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant_id", Value: "00000000-0000-0000-0000-000000000000"}}}); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a tenant that does not exist: %v", resp)
	}
}

func TestMeterEntryPicksTheQuota(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	_, key := tenantWithKey(t, in, 10000, 10000, 1000)
	ctx := context.Background()
	resp := ask(t, in, ctx, 5, keyDescriptor(key, "meter", "exports"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetName() != "exports" {
		t.Fatalf("5 exports of 5: %v", resp)
	}
	if resp := ask(t, in, ctx, 1, keyDescriptor(key, "meter", "exports")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the 6th export: %v", resp)
	}
	if resp := ask(t, in, ctx, 1, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("requests are another meter: %v", resp)
	}
	resp = ask(t, in, ctx, 1, keyDescriptor(key, "meter", "exprots"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "invalid" {
		t.Fatalf("a meter no plan defines (a typo must not be unlimited): %v", resp)
	}
}

func TestAnotherDomainIsOKAndCounted(t *testing.T) {
	pool := pgtest.New(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{})
	resp, err := in.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge-proxy",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{keyDescriptor("not-a-key")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another domain: %v", resp)
	}
	if got := counter(t, in.reg, "tollgate_rls_foreign_domain_total"); got != 1 {
		t.Fatalf("tollgate_rls_foreign_domain_total = %v, want 1", got)
	}
}

func TestRedisDownNeverPassesAnUncheckedRequestAndHealthSaysSo(t *testing.T) {
	pool := pgtest.New(t)
	srv := redistest.StartServer(t)
	in := newInstance(t, pool, redistest.Prefix(), setup{addr: srv.Addr, failMode: limiter.FailClosed, timeout: 200 * time.Millisecond})
	_, key := tenantWithKey(t, in, 10000, 10000, 1000)
	ctx := context.Background()
	serving := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := in.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return r.Status
	}
	testkit.Eventually(t, 10*time.Second, "health SERVING", func() bool {
		return serving("") == healthpb.HealthCheckResponse_SERVING && serving(rls.ServiceName) == healthpb.HealthCheckResponse_SERVING
	})
	if resp := ask(t, in, ctx, 0, keyDescriptor(key)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with Redis up: %v", resp)
	}

	srv.Kill()
	start := time.Now()
	resp := ask(t, in, ctx, 0, keyDescriptor(key))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, rls.ReasonHeader) != "unavailable" || header(resp, "retry-after") != "1" {
		t.Fatalf("Redis down, fail mode closed: %v (took %s)", resp, time.Since(start))
	}
	testkit.Eventually(t, 10*time.Second, "health NOT_SERVING with Redis down", func() bool {
		return serving("") == healthpb.HealthCheckResponse_NOT_SERVING && serving(rls.ServiceName) == healthpb.HealthCheckResponse_NOT_SERVING
	})
	srv.Restart(t)
	testkit.Eventually(t, 10*time.Second, "health SERVING after Redis returned", func() bool {
		return serving("") == healthpb.HealthCheckResponse_SERVING
	})
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}
