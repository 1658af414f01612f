package httpapi

import (
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// MAX_IN_FLIGHT: with the cap reached (decisions stuck on a paused Redis),
// the next request is shed at once with 503 and Retry-After, never 429, and
// counted in tollgate_http_overloaded_total.
func TestMaxInFlightShedsWith503(t *testing.T) {
	// Not parallel: it measures exactness under load, which other tests
	// of the package would add to.
	pool := pgtest.New(t)
	srv := redistest.StartServer(t)
	in := newLimitInstance(t, pool, srv.Addr, redistest.Prefix(), limitSetup{opts: limiter.Options{
		MaxInFlight: 2, Timeout: 3 * time.Second, FailMode: limiter.FailModes{Rate: limiter.FailOpen, Quota: limiter.FailOpen},
	}})
	plan := in.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000}, nil)
	_, key := in.newTenant(t, plan)
	if r := in.call(t, http.MethodPost, "/v1/check", key, nil); r.status != http.StatusOK {
		t.Fatalf("warm-up: %d %s", r.status, r.raw)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = srv.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.call(t, http.MethodPost, "/v1/check", key, nil)
		}()
	}
	time.Sleep(300 * time.Millisecond) // let both decisions reach Redis and hang
	r := in.call(t, http.MethodPost, "/v1/check", key, nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || !strings.Contains(r.raw, "overloaded") {
		t.Fatalf("over the cap: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if r.took > time.Second {
		t.Fatalf("shedding took %v", r.took)
	}
	if n := counterSum(t, in.reg, "tollgate_http_overloaded_total"); n < 1 {
		t.Fatalf("tollgate_http_overloaded_total = %v", n)
	}
	resume()
	wg.Wait()
	if r := in.call(t, http.MethodPost, "/v1/check", key, nil); r.status != http.StatusOK {
		t.Fatalf("after Redis resumed: %d %s", r.status, r.raw)
	}
}

// MAX_IN_FLIGHT is read (and a bad value names the variable).
func TestMaxInFlightConfig(t *testing.T) {
	// Not parallel: it measures exactness under load, which other tests
	// of the package would add to.
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := config.Load(env(map[string]string{"MAX_IN_FLIGHT": "500", "TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1"}))
	if err != nil || c.MaxInFlight != 500 || len(c.TrustedProxies) != 2 {
		t.Fatalf("Load: %+v %v", c.MaxInFlight, err)
	}
	if _, err := config.Load(env(map[string]string{"MAX_IN_FLIGHT": "-1"})); err == nil || !strings.Contains(err.Error(), "MAX_IN_FLIGHT") {
		t.Fatalf("MAX_IN_FLIGHT=-1: %v", err)
	}
	if _, err := config.Load(env(map[string]string{"TRUSTED_PROXIES": "10.0.0.0/33"})); err == nil || !strings.Contains(err.Error(), "TRUSTED_PROXIES") {
		t.Fatalf("TRUSTED_PROXIES bad: %v", err)
	}
}

// counterSum adds up every series of a counter (0 when it is missing).
func counterSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
