package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// A Postgres that hangs (every server process SIGSTOPped: connections are
// accepted, nothing answers) holds no request past DATABASE_TIMEOUT: usage
// ingest, GET /v1/usage, the admin and tenant routes answer 503 with
// Retry-After and a problem body within the deadline, and answer normally
// once Postgres continues. Before the deadline they waited as long as the
// client did (9.8 s to over 20 s in the measurement).
func TestPostgresPauseAnswers503WithinDatabaseTimeout(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartServer(t)
	rs := redistest.StartServer(t)
	api := startLiveAPI(t, rs, map[string]string{
		"DATABASE_URL":       pg.URL("tollgate"),
		"MIGRATE_ON_START":   "true",
		"DATABASE_TIMEOUT":   "1s",
		"DATABASE_MAX_CONNS": "4",
	})
	// Runs before the api's cleanup (LIFO): a paused Postgres would hold
	// its draining.
	t.Cleanup(func() { pg.Resume(t) })
	plan := "hang-" + strings.ToLower(randomToken()[4:16])
	api.must("POST", "/admin/v1/plans", api.admin, map[string]any{"key": plan, "name": plan,
		"quotas": map[string]any{"exports": map[string]any{"limit": 1000, "mode": "soft"}}}, http.StatusCreated, nil)
	var tenant struct{ ID string }
	api.must("POST", "/admin/v1/tenants", api.admin, map[string]any{"name": "hang", "plan": plan}, http.StatusCreated, &tenant)
	var key, fresh struct{ ID, Key string }
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/api-keys", api.admin, map[string]any{"name": "k"}, http.StatusCreated, &key)
	// Never used before the pause: authenticating it needs Postgres.
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/api-keys", api.admin, map[string]any{"name": "fresh"}, http.StatusCreated, &fresh)
	now := time.Now().UTC().Format(time.RFC3339)
	events := func(id string) map[string]any {
		return map[string]any{"events": []any{map[string]any{"id": id, "meter": "exports", "quantity": 2, "timestamp": now}}}
	}
	var link struct{ URL string }
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/dashboard-links", api.admin, nil, http.StatusCreated, &link)
	api.dashboardLogin(link.URL)
	// Warm: the key is then in the api's key cache, so what follows
	// reaches each route's own Postgres steps.
	api.must("POST", "/v1/usage/events", key.Key, events("before"), http.StatusOK, nil)
	api.must("GET", "/v1/usage", key.Key, nil, http.StatusOK, nil)

	type call struct {
		method, path, token string
		body                any
	}
	calls := []call{
		{"POST", "/v1/usage/events", key.Key, events("during")},
		{"GET", "/v1/usage", key.Key, nil},
		{"GET", "/admin/v1/tenants/" + tenant.ID, api.admin, nil},
		{"GET", "/admin/v1/tenants", api.admin, nil},
		{"POST", "/admin/v1/tenants", api.admin, map[string]any{"name": "during", "plan": plan}},
		{"GET", "/admin/v1/plans", api.admin, nil},
		{"GET", "/v1/entitlements", fresh.Key, nil}, // a 503, not a 401: the key may well be valid
	}
	pg.Pause(t)
	// DATABASE_TIMEOUT, plus two seconds for -race on two loaded cores.
	const bound = time.Second + 2*time.Second
	for _, c := range calls {
		// The client gives up long after the bound, so that a request
		// that hangs fails here instead of hanging the test.
		r := doWithin(t, api, 20*time.Second, c.method, c.path, c.token, c.body)
		t.Logf("%s %s with Postgres paused: %d in %v (Retry-After %q) %s", c.method, c.path, r.status, r.took, r.header.Get("Retry-After"), r.body)
		var p struct {
			Status int `json:"status"`
		}
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			r.header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(r.body, &p) != nil || p.Status != 503 {
			t.Errorf("%s %s with Postgres paused: %d (Retry-After %q, %s) %s, want 503 with Retry-After and a problem body",
				c.method, c.path, r.status, r.header.Get("Retry-After"), r.header.Get("Content-Type"), r.body)
		}
		if r.took > bound {
			t.Errorf("%s %s took %v with Postgres paused, want under %v (DATABASE_TIMEOUT=1s)", c.method, c.path, r.took, bound)
		}
	}

	// The dashboard (its session is in Postgres) answers within the
	// deadline too.
	r := doWithin(t, api, 20*time.Second, "GET", "/dashboard", "", nil)
	t.Logf("GET /dashboard with Postgres paused: %d in %v", r.status, r.took)
	if r.status != http.StatusServiceUnavailable || r.took > bound {
		t.Errorf("GET /dashboard with Postgres paused: %d in %v, want 503 within %v", r.status, r.took, bound)
	}

	pg.Resume(t)
	testkit.Eventually(t, 30*time.Second, "ingest and GET /v1/usage answer 200 once Postgres continues", func() bool {
		return doWithin(t, api, 20*time.Second, "POST", "/v1/usage/events", key.Key, events("after")).status == http.StatusOK &&
			doWithin(t, api, 20*time.Second, "GET", "/v1/usage", key.Key, nil).status == http.StatusOK
	})
}

// doWithin is liveAPI.do with a client-side deadline: a request still
// unanswered after it is reported as status 0, with took = the deadline.
func doWithin(t *testing.T, a *liveAPI, within time.Duration, method, path, token string, body any) liveAnswer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := a.c.Do(req)
	if err != nil {
		return liveAnswer{took: time.Since(start), header: http.Header{}, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return liveAnswer{status: resp.StatusCode, header: resp.Header, body: raw, took: time.Since(start)}
}
