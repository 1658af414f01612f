package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const adminToken = "tga_e2e_admin_token_0123456789"

// proc is a process the test started, its output kept for failures.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, name, bin string, env map[string]string) *proc {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{name: name, cmd: cmd, out: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// buildOnce builds the three binaries into one directory for the whole run.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{"cmd/api", "cmd/worker", "examples/backend"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, filepath.Base(pkg)), "github.com/tollgatehq/tollgate/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

type client struct {
	t    *testing.T
	base string
}

func (c client) do(method, path, token string, body any, hdr map[string]string) (*http.Response, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return res, m
}

func (c client) admin(method, path string, body any, want int) map[string]any {
	c.t.Helper()
	res, m := c.do(method, path, adminToken, body, nil)
	if res.StatusCode != want {
		c.t.Fatalf("%s %s: %d, want %d: %v", method, path, res.StatusCode, want, m)
	}
	return m
}

func waitUntil(t *testing.T, within time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

func answers(url string) bool {
	res, err := http.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return true
}

// TestBackendEndToEnd runs the example backend against the real api and
// worker (built once), the package's Postgres database and a private
// redis-server (this test FLUSHALLs it): a hard quota of 30 admits exactly
// 30, then 429 with Retry-After and RateLimit; after Redis loses
// everything, the exhausted tenant stays refused and others are served
// (snapshots and usage loaded back from Tollgate); a plan change reaches
// the backend within 2 s; unknown tenants get a 4xx, never a 5xx.
func TestBackendEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	pgtest.New(t)
	dbURL := pgtest.URL(t)
	rs := redistest.StartServer(t)
	redisURL := "redis://" + rs.Addr + "/0"
	bin := build(t)

	apiAddr, backendAddr := freeAddr(t), freeAddr(t)
	start(t, "api", filepath.Join(bin, "api"), map[string]string{
		"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "HTTP_ADDR": apiAddr, "ADMIN_TOKEN": adminToken,
	})
	waitUntil(t, 60*time.Second, "api answers", func() bool { return answers("http://" + apiAddr + "/healthz") })
	start(t, "worker", filepath.Join(bin, "worker"), map[string]string{
		"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "WORKER_METRICS_ADDR": freeAddr(t), "FLUSH_INTERVAL": "200ms",
	})

	api := client{t, "http://" + apiAddr}
	small, big := fmt.Sprintf("e2e-%d", time.Now().UnixNano()), fmt.Sprintf("e2e-big-%d", time.Now().UnixNano())
	api.admin("POST", "/admin/v1/plans", map[string]any{"key": small, "name": "Small",
		"quotas": map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}}}, 201)
	api.admin("POST", "/admin/v1/plans", map[string]any{"key": big, "name": "Big",
		"quotas": map[string]any{"requests": map[string]any{"limit": 1000, "mode": "hard"}}}, 201)
	tenantA := api.admin("POST", "/admin/v1/tenants", map[string]any{"name": "A", "plan": small}, 201)["id"].(string)
	tenantB := api.admin("POST", "/admin/v1/tenants", map[string]any{"name": "B", "plan": small}, 201)["id"].(string)
	token := api.admin("POST", "/admin/v1/service-tokens", map[string]any{"name": "example backend"}, 201)["token"].(string)

	start(t, "backend", filepath.Join(bin, "backend"), map[string]string{
		"REDIS_URL": redisURL, "TOLLGATE_URL": "http://" + apiAddr, "TOLLGATE_TOKEN": token, "HTTP_ADDR": backendAddr,
	})
	waitUntil(t, 30*time.Second, "backend answers", func() bool { return answers("http://" + backendAddr + "/") })
	be := client{t, "http://" + backendAddr}
	as := func(tenant string) map[string]string { return map[string]string{"X-Tenant-ID": tenant} }

	// Exactly 30, every path, then 429 with Retry-After and RateLimit.
	for i := 0; i < 30; i++ {
		res, body := be.do("GET", fmt.Sprintf("/things/%d", i), "", nil, as(tenantA))
		if res.StatusCode != 200 || res.Header.Get("RateLimit") == "" || res.Header.Get("RateLimit-Policy") == "" {
			t.Fatalf("request %d: %d %v %v", i+1, res.StatusCode, res.Header, body)
		}
		if want := fmt.Sprintf(`"requests";r=%d;`, 29-i); !strings.Contains(res.Header.Get("RateLimit"), want) {
			t.Fatalf("request %d: RateLimit %q, want %s…", i+1, res.Header.Get("RateLimit"), want)
		}
	}
	refused := func(tenant string) {
		t.Helper()
		res, body := be.do("POST", "/anything", "", nil, as(tenant))
		ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		if res.StatusCode != 429 || ra < 1 || !strings.Contains(res.Header.Get("RateLimit"), `"requests";r=0`) || body["policy"] != "requests" {
			t.Fatalf("want 429 from the quota: %d %v %v", res.StatusCode, res.Header, body)
		}
	}
	refused(tenantA)

	// The worker moves the counted usage to Postgres (FLUSH_INTERVAL), the
	// bound on what a Redis loss can lose; then Redis loses everything.
	pool := pgtest.New(t)
	waitUntil(t, 30*time.Second, "usage flushed to Postgres", func() bool {
		var used int64
		err := pool.QueryRow(context.Background(), `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = $1 AND meter = 'requests'`, tenantA).Scan(&used)
		return err == nil && used == 30
	})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		refused(tenantA)
	}
	// B was never seen by the backend and is gone from Redis: its snapshot
	// comes back from Tollgate.
	if res, body := be.do("GET", "/", "", nil, as(tenantB)); res.StatusCode != 200 || body["plan"] != small {
		t.Fatalf("other tenant after FLUSHALL: %d %v", res.StatusCode, body)
	}
	// A backend process started after the loss (empty near-cache) refuses A too.
	backend2 := freeAddr(t)
	start(t, "backend2", filepath.Join(bin, "backend"), map[string]string{
		"REDIS_URL": redisURL, "TOLLGATE_URL": "http://" + apiAddr, "TOLLGATE_TOKEN": token, "HTTP_ADDR": backend2,
	})
	waitUntil(t, 30*time.Second, "second backend answers", func() bool { return answers("http://" + backend2 + "/") })
	if res, body := (client{t, "http://" + backend2}).do("GET", "/", "", nil, as(tenantA)); res.StatusCode != 429 {
		t.Fatalf("fresh backend admitted the exhausted tenant: %d %v", res.StatusCode, body)
	}

	// A plan change reaches the backend within 2 s.
	changed := time.Now()
	api.admin("PUT", "/admin/v1/tenants/"+tenantA+"/plan", map[string]any{"plan": big}, 200)
	waitUntil(t, 2*time.Second-time.Since(changed), "the backend follows the plan change", func() bool {
		res, body := be.do("GET", "/", "", nil, as(tenantA))
		return res.StatusCode == 200 && body["plan"] == big
	})
	t.Logf("plan change followed after %v", time.Since(changed))

	// Unknown tenants: 4xx, never 5xx.
	for name, id := range map[string]string{"unknown uuid": "00000000-0000-4000-8000-000000000000", "not a uuid": "acme", "missing": "", "braces": "{x}"} {
		res, body := be.do("GET", "/", "", nil, as(id))
		if res.StatusCode < 400 || res.StatusCode >= 500 {
			t.Fatalf("%s tenant: %d %v", name, res.StatusCode, body)
		}
	}
}
