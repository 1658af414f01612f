package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// NUL bytes and invalid UTF-8, in a body (raw or as \u0000), a path or a
// query: 400 problem+json, never 500, nothing stored.
func TestNULAndInvalidUTF8Are400(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, nil, map[string]any{"exports": map[string]any{"limit": 5, "mode": "soft"}})
	tenant, key := in.newTenant(t, plan)
	now := time.Now().UTC().Format(time.RFC3339)
	cases := []struct {
		name, method, path, token, body string
	}{
		{"escaped NUL in an event id", "POST", "/v1/usage/events", key, `{"events":[{"id":"evt\u0000x","meter":"exports","quantity":1,"timestamp":"` + now + `"}]}`},
		{"raw NUL in an event id", "POST", "/v1/usage/events", key, "{\"events\":[{\"id\":\"evt\x00x\",\"meter\":\"exports\",\"quantity\":1,\"timestamp\":\"" + now + "\"}]}"},
		{"invalid UTF-8 in an event id", "POST", "/v1/usage/events", key, "{\"events\":[{\"id\":\"evt\xff\",\"meter\":\"exports\",\"quantity\":1,\"timestamp\":\"" + now + "\"}]}"},
		{"NUL in a check meter", "POST", "/v1/check", key, `{"meter":"a\u0000"}`},
		{"NUL in a plan name", "POST", "/admin/v1/plans", limitTestAdminToken, `{"key":"nulplan","name":"x\u0000y"}`},
		{"NUL in a tenant name", "POST", "/admin/v1/tenants", limitTestAdminToken, `{"name":"x\u0000y","plan":"` + plan + `"}`},
		{"NUL in an admin path", "GET", "/admin/v1/tenants/%00", limitTestAdminToken, ""},
		{"NUL in a plan path", "PATCH", "/admin/v1/plans/a%00b", limitTestAdminToken, `{"name":"x"}`},
		{"invalid UTF-8 in a path", "GET", "/admin/v1/plans/%ff", limitTestAdminToken, ""},
		{"NUL in a search", "GET", "/admin/v1/tenants?q=%00", limitTestAdminToken, ""},
		{"invalid UTF-8 in a search", "GET", "/admin/v1/tenants?q=%C3%28", limitTestAdminToken, ""},
		{"NUL in a key revocation", "DELETE", "/admin/v1/api-keys/%00", limitTestAdminToken, ""},
	}
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		a := in.call(t, c.method, c.path, c.token, body)
		if a.status != http.StatusBadRequest || !strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d %s", c.name, a.status, a.raw)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_events WHERE tenant_id = $1`, tenant).Scan(&n); err != nil || n != 0 {
		t.Fatalf("usage events stored: %d %v", n, err)
	}
	// An escaped backslash before u0000 is text, not a NUL.
	a := in.call(t, "POST", "/v1/usage/events", key, `{"events":[{"id":"evt\\u0000","meter":"exports","quantity":1,"timestamp":"`+now+`"}]}`)
	if a.status != http.StatusOK {
		t.Fatalf(`id evt\\u0000: %d %s`, a.status, a.raw)
	}
}

// /readyz names the dependency that is down, never its connection details.
func TestReadyzHidesConnectionDetails(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://secretuser:secretpw@127.0.0.1:1/secretdb?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	dead, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	api := newTestAPI(t, testAPIOptions{Deps: func(d *Deps) { d.DB = dead }})
	rec := httptest.NewRecorder()
	api.Srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "postgres") {
		t.Fatalf("readyz: %d %s", rec.Code, body)
	}
	for _, secret := range []string{"secretuser", "secretdb", "127.0.0.1", "dial", "connect"} {
		if strings.Contains(body, secret) {
			t.Fatalf("readyz body shows %q: %s", secret, body)
		}
	}
	if !strings.Contains(api.Logs.String(), "127.0.0.1:1") {
		t.Fatalf("the log lacks the error: %s", api.Logs.String())
	}
}
