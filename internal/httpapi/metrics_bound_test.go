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
