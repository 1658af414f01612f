package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// tcpCut is a TCP proxy in front of a real server that a test can cut
// (every connection reset, new ones refused) and restore on the same port:
// a Postgres outage as the api sees it, without stopping the Postgres that
// other packages' tests share.
type tcpCut struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func newTCPCut(t *testing.T, target string) *tcpCut {
	t.Helper()
	c := &tcpCut{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	c.serve(ln)
	t.Cleanup(c.down)
	return c
}

func (c *tcpCut) serve(ln net.Listener) {
	c.mu.Lock()
	c.ln = ln
	c.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns[in], c.conns[out] = true, true
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

func (c *tcpCut) down() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		c.ln.Close()
		c.ln = nil
	}
	for k := range c.conns {
		k.Close()
	}
	clear(c.conns)
}

func (c *tcpCut) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.serve(ln)
}

// Postgres down: every route answers 503 with Retry-After and a problem
// body (never 500); usage events refused meanwhile are accepted once it is
// back, and none is lost or counted twice.
func TestPostgresOutageIs503Everywhere(t *testing.T) {
	t.Parallel()
	pgtest.New(t)
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cut := newTCPCut(t, u.Host)
	u.Host = cut.addr
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000}, map[string]any{"exports": map[string]any{"limit": 100, "mode": "soft"}})
	tenant, key := in.newTenant(t, plan)
	testkit.Eventually(t, 5*time.Second, "key cache live", in.keys.KeyCacheLive)
	if r := in.call(t, http.MethodGet, "/v1/entitlements", key, nil); r.status != http.StatusOK {
		t.Fatalf("warm-up: %d %s", r.status, r.raw)
	}
	now := time.Now()
	batch := func(ids ...string) map[string]any {
		var evs []any
		for _, id := range ids {
			evs = append(evs, usageEvent(id, "exports", 1, now))
		}
		return map[string]any{"events": evs}
	}
	if r := in.call(t, http.MethodPost, "/v1/usage/events", key, batch("a1", "a2")); r.status != http.StatusOK {
		t.Fatalf("before the outage: %d %s", r.status, r.raw)
	}

	cut.down()
	calls := []struct {
		method, path, token string
		body                any
	}{
		{"POST", "/v1/usage/events", key, batch("b1", "b2")},
		{"GET", "/admin/v1/plans", limitTestAdminToken, nil},
		{"GET", "/admin/v1/plans/" + plan, limitTestAdminToken, nil},
		{"POST", "/admin/v1/plans", limitTestAdminToken, map[string]any{"key": randName("p"), "name": "x"}},
		{"GET", "/admin/v1/tenants", limitTestAdminToken, nil},
		{"GET", "/admin/v1/tenants/" + tenant, limitTestAdminToken, nil},
		{"GET", "/admin/v1/tenants/" + tenant + "/explain", limitTestAdminToken, nil},
		{"POST", "/admin/v1/tenants", limitTestAdminToken, map[string]any{"name": "x", "plan": plan}},
		{"GET", "/admin/v1/tenants/" + tenant + "/api-keys", limitTestAdminToken, nil},
		{"POST", "/admin/v1/tenants/" + tenant + "/api-keys", limitTestAdminToken, map[string]any{"name": "x"}},
		{"GET", "/admin/v1/tenants/" + tenant + "/overrides", limitTestAdminToken, nil},
		{"PUT", "/admin/v1/tenants/" + tenant + "/plan", limitTestAdminToken, map[string]any{"plan": plan}},
	}
	for _, c := range calls {
		r := in.call(t, c.method, c.path, c.token, c.body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
			!strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") || r.body["status"] != 503.0 {
			t.Errorf("%s %s with Postgres down: %d Retry-After %q %s", c.method, c.path, r.status, r.header.Get("Retry-After"), r.raw)
		}
		if strings.Contains(r.raw, cut.addr) || strings.Contains(r.raw, "dial") {
			t.Errorf("%s %s shows connection details: %s", c.method, c.path, r.raw)
		}
	}

	cut.up(t)
	testkit.Eventually(t, 10*time.Second, "usage events accepted again", func() bool {
		return in.call(t, http.MethodPost, "/v1/usage/events", key, batch("b1", "b2")).status == http.StatusOK
	})
	r := in.call(t, http.MethodPost, "/v1/usage/events", key, batch("a1", "b1", "c1"))
	if r.status != http.StatusOK || r.body["accepted"] != 1.0 || r.body["duplicates"] != 2.0 {
		t.Fatalf("after the outage: %d %s", r.status, r.raw)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_events WHERE tenant_id = $1`, tenant).Scan(&n); err != nil || n != 5 {
		t.Fatalf("usage events stored: %d (%v), want 5 (a1 a2 b1 b2 c1)", n, err)
	}
}
