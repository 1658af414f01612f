package limiter_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// exampleRedis connects to the local Redis with a fresh prefix; the
// examples clean up after themselves.
func exampleRedis() (*redis.Client, string, func()) {
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(opt)
	prefix := redistest.Prefix()
	return rdb, prefix, func() {
		redistest.Clean(context.Background(), rdb, prefix)
		rdb.Close()
	}
}

// A backend checks each request of a tenant against the tenant's plan,
// which the Tollgate server wrote to Redis.
func Example() {
	rdb, prefix, done := exampleRedis()
	defer done()
	ctx := context.Background()

	// What Tollgate's server does when a plan changes.
	store := limiter.NewStore(rdb, prefix)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	_ = store.PutSnapshot(ctx, limiter.Snapshot{
		TenantID: "acme", Plan: "pro", Status: "active", Version: 1,
		Rate:          &limiter.Rate{PerSecond: 1, Burst: 2},
		Quotas:        map[string]limiter.Quota{"requests": {Limit: 100000, Mode: "hard"}},
		PeriodStart:   start,
		PeriodEnd:     start.AddDate(1000, 0, 0), // keeps the example's output fixed
		NextPeriodEnd: start.AddDate(1001, 0, 0),
	})

	// What a backend does.
	l, _ := limiter.New(rdb, limiter.Options{Prefix: prefix})
	defer l.Close()
	for i := 0; i < 3; i++ {
		d, err := l.Allow(ctx, "acme", limiter.Request{Cost: 1})
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Plan, d.Policy, d.Policies[0].Remaining, d.Policies[1].Remaining)
	}
	// Output:
	// true pro  1 99999
	// true pro  0 99998
	// false pro rate 0 99998
}

// Limits a backend defines itself, e.g. failed logins per IP address, use a
// sliding window instead of a tenant's plan.
func ExampleLimiter_Allow_explicitLimits() {
	rdb, prefix, done := exampleRedis()
	defer done()
	l, _ := limiter.New(rdb, limiter.Options{Prefix: prefix})
	defer l.Close()
	perIP := &limiter.Limits{Windows: []limiter.Window{{Name: "login-failures", Limit: 2, Length: time.Hour}}}
	for i := 0; i < 3; i++ {
		d, _ := l.Allow(context.Background(), "ip:192.0.2.7", limiter.Request{Cost: 1, Limits: perIP})
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
	rdb, prefix, done := exampleRedis()
	defer done()
	ctx := context.Background()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	_ = limiter.NewStore(rdb, prefix).PutSnapshot(ctx, limiter.Snapshot{
		TenantID: "acme", Plan: "free", Version: 1,
		Rate:        &limiter.Rate{PerSecond: 0.001, Burst: 1},
		PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0),
	})
	l, _ := limiter.New(rdb, limiter.Options{Prefix: prefix})
	defer l.Close()

	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	byKey := func(r *http.Request) (string, limiter.Request, error) {
		return r.Header.Get("X-Tenant"), limiter.Request{Cost: 1}, nil
	}
	h := limiter.Middleware(l, byKey)(api)

	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/things", nil)
		req.Header.Set("X-Tenant", "acme")
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
