package httpapi

import (
	"context"
	"crypto/rand"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
	"github.com/tollgatehq/tollgate/internal/testkit"
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

// serveFrom sends one request as if from peer (host:port), with extra
// headers, straight into the server.
func serveFrom(srv http.Handler, method, path, token, peer string, hdr map[string]string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = peer
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	srv.ServeHTTP(rec, req)
	return rec
}

// After N failed API keys from one address, made-up keys from it are
// refused 429 without a database query, yet a valid key from that very
// address (even one this instance has never seen) and the admin token keep
// working. Failures are shared by instances.
func TestAuthFailuresNeverBlockAValidCredential(t *testing.T) {
	t.Parallel()
	pool, queries := countedPool(t)
	rdb, prefix := redistest.New(t)
	opts := &AuthLimitOptions{Limit: 5, Window: time.Minute}
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{authOpts: opts})
	plan := a.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000}, nil)
	_, goodKey := a.newTenant(t, plan)
	testkit.Eventually(t, 5*time.Second, "key index live", a.keys.KeyIndexLive)

	for i := 0; i < 5; i++ {
		if r := a.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusUnauthorized {
			t.Fatalf("bad key %d: %d %s", i+1, r.status, r.raw)
		}
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
	if n := queries.n.Load() - q0; n != 0 {
		t.Fatalf("%d database queries for 20 made-up keys from a blocked address, want 0", n)
	}
	// The valid key and the admin token from the same address.
	for i := 0; i < 3; i++ {
		if r := a.call(t, http.MethodGet, "/v1/entitlements", goodKey, nil); r.status != http.StatusOK {
			t.Fatalf("valid key from the blocked address: %d %s", r.status, r.raw)
		}
		if r := a.call(t, http.MethodGet, "/admin/v1/plans", limitTestAdminToken, nil); r.status != http.StatusOK {
			t.Fatalf("admin token from the blocked address: %d %s", r.status, r.raw)
		}
	}
	// A key issued after the block, used at once from the blocked address.
	_, fresh := a.newTenant(t, plan)
	if r := a.call(t, http.MethodPost, "/v1/check", fresh, nil); r.status != http.StatusOK {
		t.Fatalf("new key from the blocked address: %d %s", r.status, r.raw)
	}

	// Instance B shares the window. Its first made-up key from the address
	// is looked up (B has not seen it fail) and answered 429; after that B
	// too refuses made-up keys from its index, and still admits the valid
	// key, which B has never seen (not in its cache: it is in its index).
	b := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{authOpts: opts})
	testkit.Eventually(t, 5*time.Second, "B's key index live", b.keys.KeyIndexLive)
	if r := b.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("first bad key on B: %d %s", r.status, r.raw)
	}
	q1 := queries.n.Load()
	for i := 0; i < 10; i++ {
		if r := b.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusTooManyRequests {
			t.Fatalf("bad key on B: %d %s", r.status, r.raw)
		}
	}
	if n := queries.n.Load() - q1; n != 0 {
		t.Fatalf("%d database queries on B for made-up keys, want 0", n)
	}
	if r := b.call(t, http.MethodGet, "/v1/entitlements", goodKey, nil); r.status != http.StatusOK {
		t.Fatalf("valid key on B from the blocked address: %d %s", r.status, r.raw)
	}
}

// Admin tokens and API keys fail in separate buckets: an address out of
// admin failures still gets 401 (not 429) for a wrong key, and the reverse;
// the right token is never refused.
func TestAuthFailuresSeparateBuckets(t *testing.T) {
	t.Parallel()
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
	if r := a.call(t, http.MethodGet, "/admin/v1/plans", limitTestAdminToken, nil); r.status != http.StatusOK {
		t.Fatalf("right token from the address: %d %s", r.status, r.raw)
	}
	if r := a.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusUnauthorized {
		t.Fatalf("wrong API key after admin failures: %d %s (tenant bucket must be separate)", r.status, r.raw)
	}
	for i := 0; i < 2; i++ {
		a.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil)
	}
	if r := a.call(t, http.MethodGet, "/v1/entitlements", badKey(), nil); r.status != http.StatusTooManyRequests {
		t.Fatalf("4th wrong API key: %d %s", r.status, r.raw)
	}
}

// TRUSTED_PROXIES: forwarding headers name the client only when the peer is
// a trusted proxy, read from the right; IPv6 clients are grouped by /64.
func TestAuthFailuresClientAddress(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{authOpts: &AuthLimitOptions{Limit: 2, Window: time.Minute, TrustedProxies: trusted}})
	srv := a.srv
	fail := func(peer string, hdr map[string]string) int {
		return serveFrom(srv, http.MethodGet, "/v1/entitlements", badKey(), peer, hdr).Code
	}
	// Two clients behind the proxy (10.1.1.1) are counted apart.
	for i := 0; i < 2; i++ {
		if c := fail("10.1.1.1:5000", map[string]string{"X-Forwarded-For": "198.51.100.1"}); c != http.StatusUnauthorized {
			t.Fatalf("client 1 failure %d: %d", i+1, c)
		}
	}
	if c := fail("10.1.1.1:5000", map[string]string{"X-Forwarded-For": "198.51.100.1"}); c != http.StatusTooManyRequests {
		t.Fatalf("client 1 out of failures: %d", c)
	}
	// A forged leftmost hop does not help: the rightmost untrusted hop counts.
	if c := fail("10.1.1.1:5000", map[string]string{"X-Forwarded-For": "203.0.113.99, 198.51.100.1, 10.2.2.2"}); c != http.StatusTooManyRequests {
		t.Fatalf("client 1 with a forged hop: %d", c)
	}
	if c := fail("10.1.1.1:5000", map[string]string{"Forwarded": `for=198.51.100.2;proto=https`}); c != http.StatusUnauthorized {
		t.Fatalf("client 2 (Forwarded) behind the same proxy: %d", c)
	}
	// An untrusted peer's headers are ignored: its own address is counted.
	for i := 0; i < 2; i++ {
		fail("192.0.2.50:1234", map[string]string{"X-Forwarded-For": "198.51.100." + strconv.Itoa(10+i)})
	}
	if c := fail("192.0.2.50:1234", map[string]string{"X-Forwarded-For": "198.51.100.77"}); c != http.StatusTooManyRequests {
		t.Fatalf("untrusted peer rotating X-Forwarded-For: %d", c)
	}
	// IPv6: rotating within one /64 does not reset the count; another /64 is apart.
	fail("[2001:db8:1:2::1]:443", nil)
	fail("[2001:db8:1:2:ffff::77]:443", nil)
	if c := fail("[2001:db8:1:2:abcd::9]:443", nil); c != http.StatusTooManyRequests {
		t.Fatalf("third address of one /64: %d", c)
	}
	if c := fail("[2001:db8:1:3::1]:443", nil); c != http.StatusUnauthorized {
		t.Fatalf("another /64: %d", c)
	}
	if got := AddrKey(netip.MustParseAddr("2001:db8:1:2:3:4:5:6"), ""); got != "2001:db8:1:2::/64" {
		t.Fatalf("AddrKey v6 = %q", got)
	}
	if got := AddrKey(netip.MustParseAddr("::ffff:192.0.2.1").Unmap(), ""); got != "192.0.2.1" {
		t.Fatalf("AddrKey mapped v4 = %q", got)
	}
}

// Guard, the form the dashboard's login handlers use.
func TestAuthLimiterGuard(t *testing.T) {
	t.Parallel()
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
		if err := al.Guard(ctx, AuthTenant, "198.51.100.1", fail); err != errUnauthorizedForTest {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
	}
	err := al.Guard(ctx, AuthTenant, "198.51.100.1", fail)
	le, ok := err.(*AuthLimitedError)
	if !ok || calls != 3 {
		t.Fatalf("third attempt: %v (checks %d), want *AuthLimitedError and 3 checks", err, calls)
	}
	rec := httptest.NewRecorder()
	le.Write(rec)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("Write: %d %v", rec.Code, rec.Header())
	}
	// A valid credential from the same address passes.
	if err := al.Guard(ctx, AuthTenant, "198.51.100.1", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("valid credential from a blocked address: %v", err)
	}
	// Other errors (not a failed login) are not counted.
	other := NewAuthLimiter(in.lim, AuthLimitOptions{Limit: 1, Window: time.Minute})
	for i := 0; i < 3; i++ {
		if err := other.Guard(ctx, AuthTenant, "198.51.100.2", func(context.Context) error { return context.DeadlineExceeded }); err != context.DeadlineExceeded {
			t.Fatalf("non-auth error %d: %v", i+1, err)
		}
	}
	if ClientIP(&http.Request{RemoteAddr: "[2001:db8::1]:443"}) != "2001:db8::/64" {
		t.Fatal("ClientIP of an IPv6 peer")
	}
}

var errUnauthorizedForTest = apperr.New(apperr.Unauthorized, "wrong password")
