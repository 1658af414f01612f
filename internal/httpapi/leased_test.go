package httpapi

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// With the limiter's leased mode (LIMITER_PREFETCH=true), POST
// /v1/check answers what exact mode would: the quota's RateLimit r counts
// down one by one, every header parses, and past the quota a 429 carries
// Retry-After no earlier than the quota's t and a problem body naming it.
func TestCheckHeadersWithPrefetch(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{opts: limiter.Options{Prefetch: true}})
	plan := in.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000},
		map[string]any{"requests": map[string]any{"limit": 40, "mode": "hard"}})
	_, key := in.newTenant(t, plan)

	quotaItem := func(items []sfItem) sfItem {
		for _, it := range items {
			if it.name == "requests" {
				return it
			}
		}
		t.Fatalf("no requests item in %+v", items)
		return sfItem{}
	}
	for i := 1; i <= 40; i++ {
		r := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1, "meter": "requests"})
		if r.status != http.StatusOK || r.body["allowed"] != true {
			t.Fatalf("call %d: %d %s", i, r.status, r.raw)
		}
		items := assertLimitHeaders(t, "leased check", r)
		if items[0].name != limiter.PolicyRate {
			t.Fatalf("call %d: first item %q, want rate", i, items[0].name)
		}
		if got := quotaItem(items).params["r"]; got != strconv.Itoa(40-i) {
			t.Fatalf("call %d: requests r=%s, want %d (as exact mode)", i, got, 40-i)
		}
	}
	r := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1, "meter": "requests"})
	if r.status != http.StatusTooManyRequests || r.body["policy"] != "requests" {
		t.Fatalf("past the quota: %d %s", r.status, r.raw)
	}
	q := quotaItem(assertLimitHeaders(t, "leased 429", r))
	retryAfter, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	tt, _ := strconv.ParseInt(q.params["t"], 10, 64)
	if err != nil || retryAfter < tt || q.params["r"] != "0" {
		t.Fatalf("Retry-After %q with requests %+v", r.header.Get("Retry-After"), q.params)
	}
}
