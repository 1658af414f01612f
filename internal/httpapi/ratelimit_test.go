package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// A plan change made through the admin API of one instance is enforced by
// another instance (its own limiter, Redis client and near-cache) within a
// second.
func TestPlanChangeEnforcedOnOtherInstanceWithinASecond(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	b := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})

	plan := a.newPlan(t, map[string]any{"per_second": 1, "burst": 2}, nil)
	_, key := a.newTenant(t, plan)
	for i := 0; i < 2; i++ {
		if r := b.call(t, http.MethodPost, "/v1/check", key, nil); r.status != http.StatusOK {
			t.Fatalf("call %d on B: %d %s", i+1, r.status, r.raw)
		}
	}
	r := b.call(t, http.MethodPost, "/v1/check", key, nil)
	if r.status != http.StatusTooManyRequests || r.body["policy"] != limiter.PolicyRate || r.body["plan"] != plan {
		t.Fatalf("third call on B: %d %s, want 429 naming plan %s and policy rate", r.status, r.raw, plan)
	}

	a.admin(t, http.MethodPatch, "/admin/v1/plans/"+plan, map[string]any{"rate": map[string]any{"per_second": 1, "burst": 50}}, http.StatusOK)
	took := testkit.Eventually(t, time.Second, "plan change seen by instance B", func() bool {
		return b.call(t, http.MethodPost, "/v1/check", key, nil).status == http.StatusOK
	})
	t.Logf("instance B enforced the new plan %v after the PATCH on A", took)
	// And the new burst is what B enforces now: well over the old 2.
	for i := 0; i < 10; i++ {
		if r := b.call(t, http.MethodPost, "/v1/check", key, nil); r.status != http.StatusOK {
			t.Fatalf("call %d after the upgrade: %d %s", i+1, r.status, r.raw)
		}
	}
}

// Every /v1 response carries the rate-limit headers from the same decision,
// 200s as much as 400s and 429s.
func TestEveryV1ResponseCarriesRateLimitHeaders(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 100, "burst": 100},
		map[string]any{"requests": map[string]any{"limit": 1000, "mode": "hard"}})
	_, key := in.newTenant(t, plan)

	calls := []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/v1/check", nil},
		{http.MethodPost, "/v1/check", map[string]any{"cost": 3, "meter": "requests"}},
		{http.MethodPost, "/v1/check", map[string]any{"cost": 0}}, // 400 still carries them
		{http.MethodGet, "/v1/entitlements", nil},
		{http.MethodGet, "/v1/usage", nil},
		{http.MethodPost, "/v1/usage/events", map[string]any{"events": []any{map[string]any{"id": "e1", "meter": "exports", "quantity": 1}}}},
	}
	routes := map[string]bool{}
	for _, r := range in.srv.Echo().Routes() {
		routes[r.Method+" "+r.Path] = true
	}
	tested := 0
	for _, c := range calls {
		if !routes[c.method+" "+c.path] {
			t.Logf("%s %s is not registered yet; skipped", c.method, c.path)
			continue
		}
		tested++
		r := in.call(t, c.method, c.path, key, c.body)
		if r.status >= 500 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.raw)
		}
		items := assertLimitHeaders(t, c.method+" "+c.path, r)
		if items[0].name != limiter.PolicyRate {
			t.Fatalf("%s %s: first RateLimit item %q, want rate", c.method, c.path, items[0].name)
		}
	}
	if tested < 2 {
		t.Fatalf("only %d /v1 routes registered", tested)
	}
	// The quota policy appears on /v1/check only, with its window.
	r := in.call(t, http.MethodPost, "/v1/check", key, nil)
	if !strings.Contains(r.header.Get("RateLimit-Policy"), `"requests";q=1000;w=`) {
		t.Fatalf("RateLimit-Policy %q lacks the requests quota", r.header.Get("RateLimit-Policy"))
	}
}

// A 429 carries Retry-After no earlier than the refusing policy's t and a
// problem body naming the plan and the policy.
func TestCheckRefusalRetryAfterAndProblemBody(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 0.25, "burst": 2}, nil)
	_, key := in.newTenant(t, plan)

	var r answer
	for i := 0; i < 3; i++ {
		r = in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1})
	}
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("third call: %d %s", r.status, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	items := assertLimitHeaders(t, "429", r)
	retryAfter, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	if err != nil || retryAfter < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	for _, it := range items {
		if it.name == limiter.PolicyRate {
			tt, _ := strconv.ParseInt(it.params["t"], 10, 64)
			if retryAfter < tt {
				t.Fatalf("Retry-After %d is earlier than the rate policy's t=%d", retryAfter, tt)
			}
			if it.params["r"] != "0" {
				t.Fatalf("refused with r=%s", it.params["r"])
			}
		}
	}
	b := r.body
	if b["status"] != float64(429) || b["plan"] != plan || b["policy"] != "rate" || b["allowed"] != false ||
		b["retry_after"] != float64(retryAfter) || b["type"] == "" || b["title"] == "" || b["detail"] == "" {
		t.Fatalf("problem body %s", r.raw)
	}
	if ps, _ := b["policies"].([]any); len(ps) == 0 {
		t.Fatalf("problem body without policies: %s", r.raw)
	}
	// The plain rate limit of another route refuses the same way.
	if r := in.call(t, http.MethodGet, "/v1/entitlements", key, nil); r.status != http.StatusTooManyRequests || r.body["policy"] != "rate" {
		t.Fatalf("GET /v1/entitlements while out of tokens: %d %s", r.status, r.raw)
	}
}

// POST /v1/check validates its optional body: cost a whole number 1–1000,
// meter [a-z0-9_.-]{1,64}; errors name the field.
func TestCheckValidation(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 5000, "burst": 5000},
		map[string]any{"requests": map[string]any{"limit": 100000, "mode": "hard"}})
	_, key := in.newTenant(t, plan)

	bad := []struct {
		body  string
		field string
	}{
		{`{"cost": 0}`, "cost"},
		{`{"cost": -1}`, "cost"},
		{`{"cost": 1001}`, "cost"},
		{`{"cost": "x"}`, "cost"},
		{`{"cost": 1.5}`, "cost"},
		{`{"cost": 1e2}`, "cost"},
		{`{"cost": true}`, "cost"},
		{`{"meter": "Bad Meter"}`, "meter"},
		{`{"meter": ""}`, "meter"},
		{`{"meter": "` + strings.Repeat("m", 65) + `"}`, "meter"},
		{`{"meter": 5}`, "meter"},
		{`{"costs": 1}`, "costs"},
	}
	for _, c := range bad {
		r := in.call(t, http.MethodPost, "/v1/check", key, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, `"field":"`+c.field+`"`) {
			t.Fatalf("body %s: %d %s, want 400 naming %s", c.body, r.status, r.raw, c.field)
		}
		assertLimitHeaders(t, "400 for "+c.body, r)
	}
	if r := in.call(t, http.MethodPost, "/v1/check", key, `{"cost": `); r.status != http.StatusBadRequest {
		t.Fatalf("malformed JSON: %d %s", r.status, r.raw)
	}
	if r := in.call(t, http.MethodPost, "/v1/check", key, `{"meter": "`+strings.Repeat("m", 5000)+`"}`); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %s", r.status, r.raw)
	}

	// Another plan defines the meter below; this tenant's plan leaves it
	// unlimited (a meter no plan defines would be 422).
	in.newPlan(t, nil, map[string]any{"api.calls_v2-x": map[string]any{"limit": 5, "mode": "hard"}})
	good := []struct {
		body      string
		remaining float64 // of the requests quota, when it is checked
	}{
		{``, 99999},
		{`{}`, 99998},
		{`{"cost": 1000}`, 98998},
		{`{"cost": null, "meter": "requests"}`, 98997},
		{`{"meter": "api.calls_v2-x"}`, -1}, // no quota for this meter in this plan: rate only
	}
	for _, c := range good {
		r := in.call(t, http.MethodPost, "/v1/check", key, c.body)
		if r.status != http.StatusOK || r.body["allowed"] != true || r.body["plan"] != plan {
			t.Fatalf("body %q: %d %s", c.body, r.status, r.raw)
		}
		ps, _ := r.body["policies"].([]any)
		var quota map[string]any
		for _, p := range ps {
			pm := p.(map[string]any)
			for _, f := range []string{"name", "limit", "remaining", "reset"} {
				if _, ok := pm[f]; !ok {
					t.Fatalf("body %q: policy without %s: %s", c.body, f, r.raw)
				}
			}
			if pm["name"] == "requests" {
				quota = pm
			}
		}
		switch {
		case c.remaining < 0 && quota != nil:
			t.Fatalf("body %q: the requests quota was checked: %s", c.body, r.raw)
		case c.remaining >= 0 && (quota == nil || quota["remaining"] != c.remaining):
			t.Fatalf("body %q: requests quota %v, want remaining %v: %s", c.body, quota, c.remaining, r.raw)
		}
	}
	// Without a key: 401, and no limiter involved.
	if r := in.call(t, http.MethodPost, "/v1/check", "", nil); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no key: %d %s", r.status, r.raw)
	}
}

// A hard quota used up through /v1/check refuses with policy "requests",
// while reading entitlements and usage still works (they never take quota).
func TestHardQuotaExhaustedStillReadsEntitlementsAndUsage(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000},
		map[string]any{"requests": map[string]any{"limit": 5, "mode": "hard"}})
	_, key := in.newTenant(t, plan)

	for _, cost := range []int{3, 2} {
		if r := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": cost}); r.status != http.StatusOK {
			t.Fatalf("cost %d: %d %s", cost, r.status, r.raw)
		}
	}
	r := in.call(t, http.MethodPost, "/v1/check", key, nil)
	if r.status != http.StatusTooManyRequests || r.body["policy"] != "requests" || r.body["plan"] != plan {
		t.Fatalf("over the quota: %d %s", r.status, r.raw)
	}
	ra, _ := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	if ra < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	for _, path := range []string{"/v1/entitlements", "/v1/usage"} {
		registered := false
		for _, rt := range in.srv.Echo().Routes() {
			registered = registered || (rt.Method == http.MethodGet && rt.Path == path)
		}
		if !registered {
			t.Logf("GET %s is not registered yet; skipped", path)
			continue
		}
		r := in.call(t, http.MethodGet, path, key, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s over the quota: %d %s", path, r.status, r.raw)
		}
		assertLimitHeaders(t, "GET "+path, r)
	}
}

// The limiter's metrics reach /metrics.
func TestLimiterMetricsExposed(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 0.01, "burst": 1}, nil)
	_, key := in.newTenant(t, plan)
	for i := 0; i < 3; i++ {
		in.call(t, http.MethodPost, "/v1/check", key, nil)
	}
	m := in.call(t, http.MethodGet, "/metrics", "", nil).raw
	for _, want := range []string{
		`tollgate_limiter_decisions_total{fallback="none",outcome="allowed",policy="none"} 1`,
		`tollgate_limiter_decisions_total{fallback="none",outcome="refused",policy="rate"} 2`,
		`tollgate_limiter_refusal_cache_hits_total{policy="rate"} 1`,
		`tollgate_limiter_snapshot_cache_total{result="hit"}`,
		`tollgate_limiter_snapshot_cache_total{result="miss"}`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, grepLines(m, "tollgate_limiter"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// An upgrade to a faster rate lifts a refusal made under the slower one
// within a second, on another instance: the debt run up at 0.01/s must not
// keep the tenant refused for ~199 s at 50/s.
func TestRateUpgradeLiftsRefusalWithinASecond(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	b := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := a.newPlan(t, map[string]any{"per_second": 0.01, "burst": 2}, nil)
	_, key := a.newTenant(t, plan)
	for i := 0; i < 3; i++ {
		b.call(t, http.MethodPost, "/v1/check", key, nil)
	}
	if r := b.call(t, http.MethodPost, "/v1/check", key, nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("over the burst: %d %s", r.status, r.raw)
	}
	a.admin(t, http.MethodPatch, "/admin/v1/plans/"+plan, map[string]any{"rate": map[string]any{"per_second": 50, "burst": 50}}, http.StatusOK)
	deadline := time.Now().Add(time.Second)
	for {
		r := b.call(t, http.MethodPost, "/v1/check", key, nil)
		if r.status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 1s after the upgrade to 50/s: %s RateLimit: %s", r.raw, r.header.Get("RateLimit"))
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}
