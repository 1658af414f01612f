package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
)

// The examples run as written in a program of their own: they need a
// Redis on localhost:6379 and nothing else. Without one, `go test` skips
// them (see TestMain); with CI set it fails instead.

// examplePrefix keeps the examples' keys apart from real data; TestMain
// removes them afterwards.
var examplePrefix = "example" + strconv.Itoa(os.Getpid())

// A backend checks each request of a tenant against the tenant's plan. In
// production the plan comes from Tollgate (see ExampleRemoteLoaders); here
// a Loader hands out a fixed plan, as a backend that keeps its plans itself
// would.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	plans := func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
		if tenant != "acme" {
			return limiter.Snapshot{}, limiter.ErrUnknownTenant
		}
		return limiter.Snapshot{
			Plan: "pro", Status: "active", Version: 1,
			Rate:          &limiter.Rate{PerSecond: 1, Burst: 2},
			Quotas:        map[string]limiter.Quota{"requests": {Limit: 100000, Mode: limiter.ModeHard}},
			PeriodStart:   start,
			PeriodEnd:     start.AddDate(1000, 0, 0), // keeps the example's output fixed
			NextPeriodEnd: start.AddDate(1001, 0, 0),
		}, nil
	}
	l, err := limiter.New(rdb, limiter.Options{Prefix: examplePrefix, Loader: plans})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	ctx := context.Background()
	for i := 0; i < 3; i++ {
		d, err := l.Allow(ctx, "acme", limiter.Request{}) // Cost 0 means 1
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(d.Allowed, d.Plan, d.Policy, d.Policies[0].Remaining, d.Policies[1].Remaining)
	}
	_, err = l.Allow(ctx, "globex", limiter.Request{})
	fmt.Println(err)
	// Output:
	// true pro  1 99999
	// true pro  0 99998
	// false pro rate 0 99998
	// limiter: unknown tenant
}

// Limits a backend defines itself, e.g. failed logins per IP address, use a
// sliding window instead of a tenant's plan.
func ExampleLimiter_Allow_explicitLimits() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	l, err := limiter.New(rdb, limiter.Options{Prefix: examplePrefix})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	perIP := &limiter.Limits{Windows: []limiter.Window{{Name: "login-failures", Limit: 2, Length: time.Hour}}}
	for i := 0; i < 3; i++ {
		d, err := l.Allow(context.Background(), "ip:192.0.2.7", limiter.Request{Limits: perIP})
		if err != nil {
			fmt.Println(err)
			return
		}
		if d.Allowed {
			fmt.Println("allowed")
		} else {
			fmt.Println("refused by", d.Policy)
		}
	}
	// Output:
	// allowed
	// allowed
	// refused by login-failures
}

// The middleware resolves the tenant, sets the RateLimit headers and
// answers 429 with a problem body.
func ExampleMiddleware() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	free := func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
		start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		return limiter.Snapshot{Plan: "free", Version: 1,
			Rate:        &limiter.Rate{PerSecond: 0.001, Burst: 1},
			PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0)}, nil
	}
	l, err := limiter.New(rdb, limiter.Options{Prefix: examplePrefix, Loader: free})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	byKey := func(r *http.Request) (string, limiter.Request, error) {
		return r.Header.Get("X-Tenant"), limiter.Request{Cost: 1, Meter: "requests"}, nil
	}
	h := limiter.Middleware(l, byKey)(api)

	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/things", nil)
		req.Header.Set("X-Tenant", "initech")
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "rate";q=1;w=1000 "rate";r=0;t=1000
	// 429 "rate";q=1;w=1000 "rate";r=0;t=1000
}

// WriteHeaders renders a decision as the IETF RateLimit headers.
func ExampleWriteHeaders() {
	h := http.Header{}
	limiter.WriteHeaders(h, &limiter.Decision{Allowed: true, Policies: []limiter.PolicyStatus{
		{Name: "rate", Limit: 200, Window: 10 * time.Second, Remaining: 57, Reset: time.Second},
		{Name: "requests", Limit: 100000, Window: 30 * 24 * time.Hour, Remaining: 4000, Reset: 3 * 24 * time.Hour, Mode: "hard"},
	}})
	fmt.Println(h.Get("RateLimit-Policy"))
	fmt.Println(h.Get("RateLimit"))
	fmt.Println(h.Get("X-RateLimit-Remaining"))
	// Output:
	// "rate";q=200;w=10, "requests";q=100000;w=2592000
	// "rate";r=57;t=1, "requests";r=4000;t=259200
	// 4000
}

// A backend outside Tollgate loads what Redis lost (a flush, a failover)
// from Tollgate's API with a service token. Here an httptest server stands
// in for Tollgate; in production the URL and token come from the
// environment (TOLLGATE_URL, TOLLGATE_TOKEN).
func ExampleNewRemote() {
	tollgate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tgs_example" || r.URL.Path != "/service/v1/tenants/umbrella/snapshot" {
			http.Error(w, `{"detail": "no such tenant"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"plan": "team", "version": 3, "rate": {"per_second": 100, "burst": 1000},
			"period_start": "2026-11-01T00:00:00Z", "period_end": "2026-12-01T00:00:00Z"}`)
	}))
	defer tollgate.Close()

	remote, err := limiter.NewRemote(tollgate.URL, "tgs_example", limiter.RemoteOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	l, err := limiter.New(rdb, limiter.Options{Prefix: examplePrefix, Loader: remote.Snapshot, UsageLoader: remote.Usage})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()

	d, err := l.Allow(context.Background(), "umbrella", limiter.Request{Cost: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Allowed, d.Plan, d.Policies[0].Remaining)
	_, err = l.Allow(context.Background(), "hooli", limiter.Request{})
	fmt.Println(errors.Is(err, limiter.ErrUnknownTenant))
	// Output:
	// true team 990
	// true
}

// TestExamplesSkipWithoutRedis runs this test binary again with the Redis
// probe pointed at a closed port: the examples are skipped (exit 0, none
// run), and with CI set the run fails instead.
func TestExamplesSkipWithoutRedis(t *testing.T) {
	if os.Getenv("LIMITER_EXAMPLES_PROBE") != "" {
		t.Skip("inside the re-run")
	}
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^Example", "-test.v")
		cmd.Env = append(os.Environ(), "LIMITER_EXAMPLES_PROBE=127.0.0.1:1", "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "skipping the examples") || strings.Contains(out, "=== RUN   Example") {
		t.Fatalf("without Redis: %v\n%s", err, out)
	}
	out, err = run("true")
	if err == nil || !strings.Contains(out, "examples need a Redis") {
		t.Fatalf("without Redis under CI: %v\n%s", err, out)
	}
}
