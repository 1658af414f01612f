package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// seriesCount counts every series the registry exposes.
func seriesCount(t *testing.T, reg prometheus.Gatherer) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

func randToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// 1,000 requests with made-up methods and paths, unauthenticated, add no
// series: methods are known ones or "other", routes templates or
// "unmatched".
func TestMetricsLabelsAreBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	paths := []string{"/", "/x/", "/v1/", "/admin/v1/", "/dashboard/", "/healthz/", "/webhooks/"}
	send := func(n int) {
		for i := 0; i < n; i++ {
			method := strings.ToUpper("M" + randToken(3))
			if i%5 == 0 {
				method = http.MethodGet
			}
			path := paths[i%len(paths)] + randToken(4)
			if i%7 == 0 {
				path = "/healthz" // a real route, made-up method
			}
			req := httptest.NewRequest(method, path, nil)
			req.RemoteAddr = "192.0.2.1:1234"
			in.srv.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	send(300) // every kind of answer once: 404, 405, 401, then 429 (out of failures)
	before := seriesCount(t, in.reg)
	b0 := seriesNames(t, in.reg)
	send(1000)
	if after := seriesCount(t, in.reg); after != before {
		for k := range seriesNames(t, in.reg) {
			if !b0[k] {
				t.Log(k)
			}
		}
		t.Fatalf("series %d after 1,000 made-up requests, %d before", after, before)
	}
	// The counters the README names exist from the start.
	fresh := newLimitInstance(t, pool, redisAddr(t, rdb), redistest.Prefix(), limitSetup{})
	mfs, err := fresh.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, n := range []string{"tollgate_http_requests_total", "tollgate_limiter_decisions_total", "tollgate_limiter_redis_errors_total",
		"tollgate_limiter_fallbacks_total", "tollgate_limiter_snapshot_cache_total", "tollgate_http_overloaded_total"} {
		if !have[n] {
			t.Errorf("%s missing before the first request", n)
		}
	}
}

// seriesNames lists the series by name and labels.
func seriesNames(t *testing.T, reg prometheus.Gatherer) map[string]bool {
	t.Helper()
	mfs, _ := reg.Gather()
	out := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()+fmt.Sprint(m.GetLabel())] = true
		}
	}
	return out
}

// counterValue returns the value of name's series with exactly labels
// (a histogram's sample count), or -1 when there is none.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// Each request counts once in its own route, method and status series, in
// the counter and the latency histogram alike (observe keeps each label
// set's series after its first use): one route and method answering three
// statuses, and other routes and methods beside it.
func TestMetricsCountEachRequestInItsSeries(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000},
		map[string]any{"requests": map[string]any{"limit": 1000, "mode": "hard"}})
	_, key := in.newTenant(t, plan)
	for _, c := range []struct {
		method, path, token string
		body                any
		status, n           int
	}{
		{http.MethodPost, "/v1/check", key, nil, http.StatusOK, 3},
		{http.MethodPost, "/v1/check", key, "{", http.StatusBadRequest, 2},
		{http.MethodPost, "/v1/check", "", nil, http.StatusUnauthorized, 1},
		{http.MethodGet, "/healthz", "", nil, http.StatusOK, 2},
		{http.MethodPost, "/v1/check", key, nil, http.StatusOK, 2}, // series already made
	} {
		for i := 0; i < c.n; i++ {
			if got := in.call(t, c.method, c.path, c.token, c.body); got.status != c.status {
				t.Fatalf("%s %s: %d, want %d: %s", c.method, c.path, got.status, c.status, got.raw)
			}
		}
	}
	for _, c := range []struct {
		route, method, status string
		want                  float64
	}{
		{"/v1/check", "POST", "200", 5},
		{"/v1/check", "POST", "400", 2},
		{"/v1/check", "POST", "401", 1},
		{"/healthz", "GET", "200", 2},
	} {
		labels := map[string]string{"route": c.route, "method": c.method, "status": c.status}
		for _, name := range []string{"tollgate_http_requests_total", "tollgate_http_request_duration_seconds"} {
			if got := counterValue(t, in.reg, name, labels); got != c.want {
				t.Errorf("%s%v = %v, want %v", name, labels, got, c.want)
			}
		}
	}
}
