package httpapi

import (
	"context"
	"crypto/rand"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// queryCount counts the queries a pool sends.
type queryCount struct{ n atomic.Int64 }

func (q *queryCount) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}
func (q *queryCount) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedPool is a pool on the package's test database whose queries are
// counted.
func countedPool(t *testing.T) (*pgxpool.Pool, *queryCount) {
	t.Helper()
	pgtest.New(t) // makes sure the package database exists
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	qc := &queryCount{}
	cfg.ConnConfig.Tracer = qc
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, qc
}

// badKey is a well-formed API key that does not exist: each one misses
// every cache, so only the window keeps it from the database.
func badKey() string {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 250))
	body := n.Text(62)
	return "tg_" + strings.Repeat("0", 43-len(body)) + body
}

// After N failed API keys from one IP, the next requests from it are
// refused with 429 before the key is looked up: no credential check, no
// database query, even with a valid key or a forged X-Forwarded-For; other
// IPs are unaffected; the window is shared by instances.
func TestAuthFailuresPerIPRefusedBeforeTheKeyLookup(t *testing.T) {
	pool, queries := countedPool(t)
	rdb, prefix := redistest.New(t)
	opts := &AuthLimitOptions{Limit: 5, Window: time.Minute}
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{authOpts: opts})
	plan := a.newPlan(t, map[string]any{"per_second": 100, "burst": 100}, nil)
	_, goodKey := a.newTenant(t, plan)

	c0 := a.srv.AuthLimiter.Checks() // the admin calls above were checked too
	for i := 0; i < 5; i++ {
		if r := a.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusUnauthorized {
			t.Fatalf("bad key %d: %d %s", i+1, r.status, r.raw)
		}
	}
	if n := a.srv.AuthLimiter.Checks() - c0; n != 5 {
		t.Fatalf("credential checks %d, want 5", n)
	}
	q0 := queries.n.Load()
	for i := 0; i < 20; i++ {
		r := a.call(t, http.MethodPost, "/v1/check", badKey(), nil)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("bad key after the window filled: %d %s", r.status, r.raw)
		}
		if i == 0 {
			ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
			if ra < 1 || r.body["policy"] != AuthLimitPolicy || r.body["allowed"] != false {
				t.Fatalf("refusal: Retry-After %q body %s", r.header.Get("Retry-After"), r.raw)
			}
			assertLimitHeaders(t, "auth refusal", r)
		}
	}
	// A valid key and a forged X-Forwarded-For change nothing: the window
	// is looked at before any credential, keyed by the TCP peer.
	if r := a.call(t, http.MethodGet, "/v1/entitlements", goodKey, nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("valid key from the blocked IP: %d %s", r.status, r.raw)
	}
	req, _ := http.NewRequest(http.MethodGet, a.ts.URL+"/v1/entitlements", nil)
	req.Header.Set("Authorization", "Bearer "+badKey())
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("X-Real-IP", "203.0.113.7")
	resp, err := a.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("forged X-Forwarded-For: %d", resp.StatusCode)
	}
	if n := a.srv.AuthLimiter.Checks() - c0; n != 5 {
		t.Fatalf("credential checks %d after the refusals, want still 5", n)
	}
	if n := queries.n.Load() - q0; n != 0 {
		t.Fatalf("%d database queries while the IP was refused, want 0", n)
	}

	// Another IP is checked as usual.
	rec := httptest.NewRecorder()
	other := httptest.NewRequest(http.MethodGet, "/v1/entitlements", nil)
	other.RemoteAddr = "192.0.2.9:40000"
	other.Header.Set("Authorization", "Bearer "+goodKey)
	a.srv.ServeHTTP(rec, other)
	if rec.Code != http.StatusOK {
		t.Fatalf("another IP with a valid key: %d %s", rec.Code, rec.Body.String())
	}

	// Instance B shares the window: its first check of the IP goes through
	// (it has not seen it fail), the failure is counted, the next is refused.
	b := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{authOpts: opts})
	if r := b.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("first bad key on B: %d %s", r.status, r.raw)
	}
	if r := b.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("second bad key on B: %d %s", r.status, r.raw)
	}
	if n := b.srv.AuthLimiter.Checks(); n != 1 {
		t.Fatalf("credential checks on B %d, want 1", n)
	}
}

// Wrong admin tokens count too, and a blocked IP is refused even with the
// right token.
func TestAuthFailuresOfAdminToken(t *testing.T) {
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{authOpts: &AuthLimitOptions{Limit: 3, Window: time.Minute}})
	for i := 0; i < 3; i++ {
		if r := a.call(t, http.MethodGet, "/admin/v1/plans", "wrong-"+strconv.Itoa(i), nil); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d %s", i+1, r.status, r.raw)
		}
	}
	if r := a.call(t, http.MethodGet, "/admin/v1/plans", "wrong", nil); r.status != http.StatusTooManyRequests || r.body["policy"] != AuthLimitPolicy {
		t.Fatalf("after 3 failures: %d %s", r.status, r.raw)
	}
	if r := a.call(t, http.MethodGet, "/admin/v1/plans", limitTestAdminToken, nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("right token from the blocked IP: %d %s", r.status, r.raw)
	}
	// Successful logins do not count: a fresh instance (fresh window) lets
	// many right-token requests through.
	rdb2, prefix2 := redistest.New(t)
	b := newLimitInstance(t, pool, redisAddr(t, rdb2), prefix2, limitSetup{authOpts: &AuthLimitOptions{Limit: 3, Window: time.Minute}})
	for i := 0; i < 10; i++ {
		if r := b.call(t, http.MethodGet, "/admin/v1/plans", limitTestAdminToken, nil); r.status != http.StatusOK {
			t.Fatalf("right token %d: %d %s", i+1, r.status, r.raw)
		}
	}
}

// Guard, the form the dashboard's login handlers use.
func TestAuthLimiterGuard(t *testing.T) {
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	al := NewAuthLimiter(in.lim, AuthLimitOptions{Limit: 2, Window: time.Minute})
	ctx := context.Background()
	calls := 0
	fail := func(context.Context) error {
		calls++
		return errUnauthorizedForTest
	}
	for i := 0; i < 2; i++ {
		if err := al.Guard(ctx, "198.51.100.1", fail); err != errUnauthorizedForTest {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
	}
	err := al.Guard(ctx, "198.51.100.1", fail)
	le, ok := err.(*AuthLimitedError)
	if !ok || calls != 2 {
		t.Fatalf("third attempt: %v (checks %d), want *AuthLimitedError and 2 checks", err, calls)
	}
	rec := httptest.NewRecorder()
	le.Write(rec)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("Write: %d %v", rec.Code, rec.Header())
	}
	// Other errors (not a failed login) are not counted.
	other := NewAuthLimiter(in.lim, AuthLimitOptions{Limit: 1, Window: time.Minute})
	for i := 0; i < 3; i++ {
		if err := other.Guard(ctx, "198.51.100.2", func(context.Context) error { return context.DeadlineExceeded }); err != context.DeadlineExceeded {
			t.Fatalf("non-auth error %d: %v", i+1, err)
		}
	}
	if ClientIP(&http.Request{RemoteAddr: "[2001:db8::1]:443"}) != "2001:db8::1" {
		t.Fatal("ClientIP of an IPv6 peer")
	}
}

var errUnauthorizedForTest = apperr.New(apperr.Unauthorized, "wrong password")
