package limiter_test

import (
	"context"
	"fmt"
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
// production the plan comes from Tollgate (see package remote); here
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
