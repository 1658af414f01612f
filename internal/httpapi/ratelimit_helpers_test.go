package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/limiter"
)

const limitTestAdminToken = "tga_limit_test_admin_token"

// limitInstance is one api instance as cmd/api wires it: its own Redis
// client, entitlements service, limiter and metrics, on a shared database
// and Redis prefix.
type limitInstance struct {
	srv  *Server
	ts   *httptest.Server
	lim  *limiter.Limiter
	ents *entitlements.Service
	keys *credentials.Service
	rdb  *redis.Client
	reg  *prometheus.Registry
	// creds is the credits service when limitSetup.credits asked for it.
	creds *credits.Service
}

type limitSetup struct {
	opts     limiter.Options   // Prefix, Loader and Hooks are filled in
	authOpts *AuthLimitOptions // nil: the default AuthLimiter
	log      *slog.Logger      // nil: discarded
	// credits wires grants as cmd/api does: written to Redis, drawn by the
	// limiter, answered by the admin API.
	credits bool
}

// newLimitInstance starts an instance on Redis at addr (a redis:// URL's
// host:port) under prefix.
func newLimitInstance(t *testing.T, pool *pgxpool.Pool, addr, prefix string, set limitSetup) *limitInstance {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(pool, store, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	keys := credentials.New(pool, ents, nil, credentials.Options{Redis: rdb, Prefix: prefix})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = keys.Run(ctx) }()
	t.Cleanup(func() {
		// Run blocks in a pub/sub read that ignores ctx; closing the client
		// ends it.
		cancel()
		rdb.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("credentials.Service.Run did not return after cancel + Close")
		}
	})

	reg := prometheus.NewRegistry()
	m, err := NewLimiterMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	meter := metering.NewService(pool, store, nil, metering.Options{Snapshot: ents.CachedSnapshot})
	opts := set.opts
	opts.Prefix = prefix
	opts.Loader = ents.ReloadSnapshot
	opts.UsageLoader = meter.LoadUsage
	opts.Hooks = m.Hooks()
	var creds *credits.Service
	if set.credits {
		creds = credits.NewService(pool, ents, cat, nil, credits.Options{Grants: store})
		opts.GrantLoader = creds.RedisGrants
	}
	if opts.Timeout == 0 {
		// The production 50 ms is a fail-mode test's business
		// (ratelimit_failure_test.go sets its own); on 2 loaded cores under
		// -race one Redis reply can take longer, and a fallback decision
		// breaks tests about headers and counting.
		opts.Timeout = 5 * time.Second
	}
	// Its own client, as cmd/api gives it: the pool then holds only the
	// limiter's calls, which it bounds (limiter.Options.Timeout).
	limRDB := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	lim, err := limiter.New(limRDB, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close(); limRDB.Close() })
	d := Deps{Log: set.log, DB: pool, Redis: rdb, Registry: reg, AdminToken: limitTestAdminToken, Entitlements: ents, Catalogue: cat, Credentials: keys, Metering: meter, Limiter: lim, Credits: creds}
	if set.authOpts != nil {
		d.AuthLimiter = NewAuthLimiter(lim, *set.authOpts)
	}
	srv, err := NewServer(d)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &limitInstance{srv: srv, ts: ts, lim: lim, ents: ents, keys: keys, rdb: rdb, reg: reg, creds: creds}
}

// redisAddr is the host:port of the shared test Redis.
func redisAddr(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	return rdb.Options().Addr
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
	took   time.Duration
}

// call makes one request; body may be nil, a string (sent as is) or a value
// encoded as JSON.
func (in *limitInstance) call(t *testing.T, method, path, token string, body any) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, in.ts.URL+path, rd)
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
	resp, err := in.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw), took: time.Since(start)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func (in *limitInstance) admin(t *testing.T, method, path string, body any, want int) answer {
	t.Helper()
	a := in.call(t, method, path, limitTestAdminToken, body)
	if a.status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, a.status, want, a.raw)
	}
	return a
}

func randName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newPlan creates a plan with the given rate (nil: unlimited) and quotas.
func (in *limitInstance) newPlan(t *testing.T, rate map[string]any, quotas map[string]any) string {
	t.Helper()
	key := randName("p")
	body := map[string]any{"key": key, "name": key}
	if rate != nil {
		body["rate"] = rate
	}
	if quotas != nil {
		body["quotas"] = quotas
	}
	in.admin(t, http.MethodPost, "/admin/v1/plans", body, http.StatusCreated)
	return key
}

// newTenant creates a tenant on plan and returns its id and an API key.
func (in *limitInstance) newTenant(t *testing.T, plan string) (id, key string) {
	t.Helper()
	a := in.admin(t, http.MethodPost, "/admin/v1/tenants", map[string]any{"name": randName("acme-"), "plan": plan}, http.StatusCreated)
	id, _ = a.body["id"].(string)
	k := in.admin(t, http.MethodPost, "/admin/v1/tenants/"+id+"/api-keys", map[string]any{"name": "test"}, http.StatusCreated)
	key, _ = k.body["key"].(string)
	if id == "" || key == "" {
		t.Fatalf("tenant %q key %q: %s / %s", id, key, a.raw, k.raw)
	}
	return id, key
}

// sfItem is one member of a structured-field list header: a quoted name and
// its parameters.
type sfItem struct {
	name   string
	params map[string]string
}

// parseSFList parses the RateLimit and RateLimit-Policy headers strictly
// enough for the tests: `"name";k=v;k="v", …` (RFC 8941 lists of strings
// with integer or string parameters).
func parseSFList(t *testing.T, h string) []sfItem {
	t.Helper()
	var items []sfItem
	for _, member := range strings.Split(h, ",") {
		member = strings.TrimSpace(member)
		parts := strings.Split(member, ";")
		name, err := strconv.Unquote(parts[0])
		if err != nil || !strings.HasPrefix(parts[0], `"`) {
			t.Fatalf("header %q: member %q is not a quoted string", h, member)
		}
		it := sfItem{name: name, params: map[string]string{}}
		for _, p := range parts[1:] {
			k, v, ok := strings.Cut(p, "=")
			if !ok || k == "" || strings.ToLower(k) != k {
				t.Fatalf("header %q: bad parameter %q", h, p)
			}
			if strings.HasPrefix(v, `"`) {
				if v, err = strconv.Unquote(v); err != nil {
					t.Fatalf("header %q: bad string parameter %q", h, p)
				}
			} else if _, err := strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatalf("header %q: parameter %q is not an integer", h, p)
			}
			it.params[k] = v
		}
		items = append(items, it)
	}
	return items
}

// assertLimitHeaders checks the contract's rate-limit headers on a response
// and returns the RateLimit items.
func assertLimitHeaders(t *testing.T, what string, a answer) []sfItem {
	t.Helper()
	for _, h := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if a.header.Get(h) == "" {
			t.Fatalf("%s: status %d without %s (headers %v)", what, a.status, h, a.header)
		}
	}
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if n, err := strconv.ParseInt(a.header.Get(h), 10, 64); err != nil || n < 0 {
			t.Fatalf("%s: %s = %q, want a whole number", what, h, a.header.Get(h))
		}
	}
	pol := parseSFList(t, a.header.Get("RateLimit-Policy"))
	for _, p := range pol {
		if p.params["q"] == "" {
			t.Fatalf("%s: RateLimit-Policy item %q without q", what, p.name)
		}
	}
	cur := parseSFList(t, a.header.Get("RateLimit"))
	for _, c := range cur {
		if c.params["r"] == "" || c.params["t"] == "" {
			t.Fatalf("%s: RateLimit item %q without r or t", what, c.name)
		}
	}
	return cur
}
