package limithttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
)

// oneRequest is a Decider admitting a tenant's first request and refusing
// the rest; in a backend the Decider is a *limiter.Limiter.
type oneRequest map[string]bool

func (o oneRequest) Allow(_ context.Context, tenant string, _ limiter.Request) (*limiter.Decision, error) {
	d := &limiter.Decision{Allowed: !o[tenant], Plan: "free", Policies: []limiter.PolicyStatus{
		{Name: limiter.PolicyRate, Limit: 1, Window: 1000 * time.Second, Reset: 1000 * time.Second},
	}}
	if !d.Allowed {
		d.Policy, d.RetryAfter = limiter.PolicyRate, time.Second
	}
	o[tenant] = true
	return d, nil
}

// The middleware resolves the tenant, sets the RateLimit headers and
// answers 429 with a problem body.
func ExampleMiddleware() {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	byKey := func(r *http.Request) (string, limiter.Request, error) {
		return r.Header.Get("X-Tenant"), limiter.Request{Cost: 1, Meter: limiter.DefaultMeter}, nil
	}
	h := limithttp.Middleware(oneRequest{}, byKey)(api)

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
	limithttp.WriteHeaders(h, &limiter.Decision{Allowed: true, Policies: []limiter.PolicyStatus{
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
