package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// liveAPI is one api process (run, as main starts it) on a private Redis
// (and, if the test says so, a private Postgres) that a test can stop.
type liveAPI struct {
	t     *testing.T
	base  string
	admin string
	c     *http.Client
}

type liveAnswer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

func (a *liveAPI) do(method, path, token string, body any) liveAnswer {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
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
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return liveAnswer{status: resp.StatusCode, header: resp.Header, body: raw, took: time.Since(start)}
}

func (a *liveAPI) must(method, path, token string, body any, want int, out any) liveAnswer {
	a.t.Helper()
	r := a.do(method, path, token, body)
	if r.status != want {
		a.t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.body, want)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, r.body)
		}
	}
	return r
}

// dashboardLogin opens a dashboard session with a dashboard link, as a
// browser does: the link's page, then its form (token and CSRF token).
func (a *liveAPI) dashboardLogin(link string) {
	a.t.Helper()
	// Links are whole under PUBLIC_URL; this api is a.base.
	if l, err := url.Parse(link); err == nil && l.IsAbs() {
		link = l.RequestURI()
	}
	if r := a.do("GET", link, "", nil); r.status != http.StatusOK {
		a.t.Fatalf("dashboard link: %d %s", r.status, r.body)
	}
	u, err := url.Parse(a.base + "/dashboard")
	if err != nil {
		a.t.Fatal(err)
	}
	csrf := ""
	for _, c := range a.c.Jar.Cookies(u) {
		if c.Name == "tg_pre" {
			csrf = c.Value
		}
	}
	tok := strings.TrimPrefix(link, "/dashboard/login?token=")
	tok, _ = url.QueryUnescape(tok)
	resp, err := a.c.PostForm(a.base+"/dashboard/login", url.Values{"token": {tok}, "csrf": {csrf}})
	if err != nil {
		a.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "exports") {
		a.t.Fatalf("dashboard login: %d %s", resp.StatusCode, body)
	}
}

// startLiveAPI runs the api on a private redis-server, env overriding
// serveEnv's variables.
func startLiveAPI(t *testing.T, rs *redistest.Server, env map[string]string) *liveAPI {
	t.Helper()
	e := serveEnv(t)
	e["REDIS_URL"] = "redis://" + rs.Addr + "/0"
	e["MIGRATE_ON_START"] = "false"
	for k, v := range env {
		e[k] = v
	}
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"serve"}, testkit.Getenv(e), &stdout, &stderr) }()
	addr := listeningAddr(t, stderr.String, exited)
	t.Cleanup(func() {
		cancel()
		// SIGCONT first, or draining waits on the paused Redis.
		_ = rs.Signal(syscall.SIGCONT)
		waitExit(t, exited, stderr.String)
	})
	jar, _ := cookiejar.New(nil)
	return &liveAPI{t: t, base: "http://" + addr, admin: e["ADMIN_TOKEN"],
		c: &http.Client{Jar: jar, Timeout: 60 * time.Second}}
}

// A Redis that stops answering (SIGSTOP: connections are accepted, nothing
// is read) holds no request past its deadline: GET /v1/usage answers 200
// with the durable figures marked stale, the dashboard shows them with a
// notice, usage ingest and a key revocation commit in Postgres and answer.
func TestRedisPauseAnswersWithinDeadlines(t *testing.T) {
	t.Parallel()
	rs := redistest.StartServer(t)
	api := startLiveAPI(t, rs, map[string]string{"LIMITER_TIMEOUT": "50ms", "REDIS_TIMEOUT": "200ms"})
	plan := "pause-" + strings.ToLower(randomToken()[4:16])
	api.must("POST", "/admin/v1/plans", api.admin, map[string]any{"key": plan, "name": plan,
		"quotas": map[string]any{"exports": map[string]any{"limit": 100, "mode": "soft"}}}, http.StatusCreated, nil)
	plan2 := plan + "-2"
	api.must("POST", "/admin/v1/plans", api.admin, map[string]any{"key": plan2, "name": plan2,
		"quotas": map[string]any{"exports": map[string]any{"limit": 200, "mode": "soft"}}}, http.StatusCreated, nil)
	var tenant struct{ ID string }
	api.must("POST", "/admin/v1/tenants", api.admin, map[string]any{"name": "pause", "plan": plan}, http.StatusCreated, &tenant)
	var key, spare struct{ ID, Key string }
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/api-keys", api.admin, map[string]any{"name": "k"}, http.StatusCreated, &key)
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/api-keys", api.admin, map[string]any{"name": "spare"}, http.StatusCreated, &spare)
	var link struct{ URL string }
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/dashboard-links", api.admin, nil, http.StatusCreated, &link)
	api.dashboardLogin(link.URL)
	now := time.Now().UTC().Format(time.RFC3339)
	event := func(id string) map[string]any {
		return map[string]any{"events": []any{map[string]any{"id": id, "meter": "exports", "quantity": 3, "timestamp": now}}}
	}
	api.must("POST", "/v1/usage/events", key.Key, event("before"), http.StatusOK, nil)
	var usage struct {
		Stale  bool `json:"stale"`
		Meters []struct {
			Meter string `json:"meter"`
			Used  int64  `json:"used"`
		} `json:"meters"`
	}
	api.must("GET", "/v1/usage", key.Key, nil, http.StatusOK, &usage)
	if usage.Stale {
		t.Fatalf("GET /v1/usage with Redis up: stale")
	}

	if err := rs.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rs.Signal(syscall.SIGCONT) }()

	// The longest Redis wait of these answers is a publish after a commit
	// (revocation, plan change): three attempts of REDIS_TIMEOUT with
	// 100 ms of pauses. GET /v1/usage waits less: the limiter's decision
	// (LIMITER_TIMEOUT), the snapshot read and write-back (100 ms each),
	// the live read (REDIS_TIMEOUT). Two seconds on top are for Postgres
	// and -race on two loaded cores; without deadlines these took 5 s
	// here (12 s in the measurement).
	const bound = 3*200*time.Millisecond + 100*time.Millisecond + 2*time.Second

	r := api.do("GET", "/v1/usage", key.Key, nil)
	t.Logf("GET /v1/usage under a Redis pause: %d in %v: %s", r.status, r.took, r.body)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/usage under a Redis pause: %d %s", r.status, r.body)
	}
	var paused struct {
		Stale       bool   `json:"stale"`
		StaleReason string `json:"stale_reason"`
		Meters      []struct {
			Meter string `json:"meter"`
			Used  int64  `json:"used"`
		} `json:"meters"`
	}
	if err := json.Unmarshal(r.body, &paused); err != nil {
		t.Fatal(err)
	}
	if !paused.Stale || paused.StaleReason == "" || len(paused.Meters) != 1 || paused.Meters[0].Used != 3 {
		t.Errorf("GET /v1/usage under a Redis pause: %s, want stale with a reason and exports used 3 (Postgres's figure)", r.body)
	}
	if r.took > bound {
		t.Errorf("GET /v1/usage took %v under a Redis pause, want under %v", r.took, bound)
	}

	r = api.do("POST", "/v1/usage/events", key.Key, event("during"))
	t.Logf("POST /v1/usage/events under a Redis pause: %d in %v: %s", r.status, r.took, r.body)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"accepted":1`) {
		t.Errorf("POST /v1/usage/events under a Redis pause: %d %s, want 200 accepted 1", r.status, r.body)
	}
	if r.took > bound {
		t.Errorf("POST /v1/usage/events took %v under a Redis pause, want under %v", r.took, bound)
	}

	r = api.do("GET", "/dashboard", "", nil)
	t.Logf("GET /dashboard under a Redis pause: %d in %v", r.status, r.took)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "may be behind") {
		t.Errorf("GET /dashboard under a Redis pause: %d, want 200 with a \"figures may be behind\" notice:\n%s", r.status, r.body)
	}
	if r.took > bound {
		t.Errorf("GET /dashboard took %v under a Redis pause, want under %v", r.took, bound)
	}

	r = api.do("DELETE", "/admin/v1/api-keys/"+spare.ID, api.admin, nil)
	t.Logf("DELETE /admin/v1/api-keys/{id} under a Redis pause: %d in %v: %s", r.status, r.took, r.body)
	if r.status != http.StatusNoContent {
		t.Errorf("revocation under a Redis pause: %d %s, want 204 (committed in Postgres)", r.status, r.body)
	}
	if r.took > bound {
		t.Errorf("revocation took %v under a Redis pause, want under %v", r.took, bound)
	}

	// A plan change commits and publishes the new snapshot (three
	// attempts of REDIS_TIMEOUT, then the limiter reloads it).
	r = api.do("PUT", "/admin/v1/tenants/"+tenant.ID+"/plan", api.admin, map[string]any{"plan": plan2})
	t.Logf("PUT /admin/v1/tenants/{id}/plan under a Redis pause: %d in %v", r.status, r.took)
	if r.status != http.StatusOK {
		t.Errorf("plan change under a Redis pause: %d %s, want 200", r.status, r.body)
	}
	if r.took > bound {
		t.Errorf("plan change took %v under a Redis pause, want under %v", r.took, bound)
	}

	if err := rs.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The revoked key is refused, and usage is whole once Redis is back.
	if r := api.do("GET", "/v1/entitlements", spare.Key, nil); r.status != http.StatusUnauthorized {
		t.Errorf("revoked key after the pause: %d, want 401", r.status)
	}
	testkit.Eventually(t, 10*time.Second, "GET /v1/usage fresh again with used 6", func() bool {
		var u struct {
			Stale  bool `json:"stale"`
			Meters []struct {
				Used int64 `json:"used"`
			} `json:"meters"`
		}
		r := api.do("GET", "/v1/usage", key.Key, nil)
		return r.status == http.StatusOK && json.Unmarshal(r.body, &u) == nil && !u.Stale && len(u.Meters) == 1 && u.Meters[0].Used == 6
	})
}
