package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
	"github.com/tollgatehq/tollgate/limiter/remote"
)

// fakeTollgate serves the two service routes the way Tollgate's api does;
// the real api is exercised by examples/backend's end-to-end test.
type fakeTollgate struct {
	snap   limiter.Snapshot
	grants atomic.Value // string: the grants route's JSON body; unset: []
	used   atomic.Int64
	calls  atomic.Int64
	delay  atomic.Int64 // ns slept before answering
	status atomic.Int64 // non-zero: answer this status instead
}

func (f *fakeTollgate) start(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	auth := func(w http.ResponseWriter, r *http.Request) bool {
		f.calls.Add(1)
		if d := f.delay.Load(); d > 0 {
			select {
			case <-time.After(time.Duration(d)):
			case <-r.Context().Done():
				return false
			}
		}
		if r.Header.Get("Authorization") != "Bearer tgs_secret" {
			w.WriteHeader(http.StatusUnauthorized)
			return false
		}
		if s := f.status.Load(); s != 0 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(int(s))
			_, _ = w.Write([]byte(`{"detail":"injected"}`))
			return false
		}
		return true
	}
	mux.HandleFunc("GET /service/v1/tenants/{id}/snapshot", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		if r.PathValue("id") != f.snap.TenantID {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"detail":"no tenant"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(f.snap)
	})
	mux.HandleFunc("GET /service/v1/tenants/{id}/usage", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		if r.URL.Query().Get("meter") != "requests" || r.URL.Query().Get("period_start") != f.snap.PeriodStart.UTC().Format(time.RFC3339) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"used": f.used.Load()})
	})
	mux.HandleFunc("GET /service/v1/tenants/{id}/grants", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		if r.PathValue("id") != f.snap.TenantID {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"detail":"no tenant"}`))
			return
		}
		body, _ := f.grants.Load().(string)
		if body == "" {
			body = `{"tenant_id":"` + f.snap.TenantID + `","grants":[]}`
		}
		_, _ = w.Write([]byte(body))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func remoteFixture(t *testing.T) (*fakeTollgate, *remote.Client) {
	f := &fakeTollgate{snap: snapshot("acme", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 5}}
	})}
	srv := f.start(t)
	r, err := remote.New(srv.URL, "tgs_secret", remote.Options{Timeout: 200 * time.Millisecond, Attempts: 3, Backoff: 10 * time.Millisecond, Cooldown: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return f, r
}

// TestRemoteLoaders: with nothing of the tenant in Redis, the snapshot and
// the durable usage come from Tollgate; a quota counter lost with Redis is
// rebuilt from it (exhausted stays exhausted), and a tenant Tollgate does
// not know is ErrUnknownTenant.
func TestRemoteLoaders(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	f, r := remoteFixture(t)
	f.used.Store(4)
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: r.Snapshot, UsageLoader: r.Usage})
	d, err := l.Allow(ctx, "acme", limiter.Request{})
	if err != nil || !d.Allowed || d.Plan != "pro" || d.Policies[0].Remaining != 0 {
		t.Fatalf("first decision (4 durable + 1 of 5): %+v %v", d, err)
	}
	if d, err := l.Allow(ctx, "acme", limiter.Request{}); err != nil || d.Allowed {
		t.Fatalf("sixth unit admitted: %+v %v", d, err)
	}
	// Redis loses the counter: rebuilt from Tollgate's figure, still refused.
	f.used.Store(5)
	st := newStore(b.client(), b.prefix)
	b.client().Del(ctx, st.Keys().State("acme"))
	l2 := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: r.Snapshot, UsageLoader: r.Usage})
	if d, err := l2.Allow(ctx, "acme", limiter.Request{}); err != nil || d.Allowed || d.Policy != "requests" {
		t.Fatalf("after the counter was lost: %+v %v", d, err)
	}
	if _, err := l.Allow(ctx, "globex", limiter.Request{}); !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("unknown tenant: %v", err)
	}
	// The middleware answers an unknown tenant 4xx, never 5xx.
	h := limithttp.Middleware(l, func(*http.Request) (string, limiter.Request, error) { return "globex", limiter.Request{}, nil })(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("unknown tenant through the middleware: %d", rec.Code)
	}
}

// TestRemoteGrantsRebuildAfterRedisLoss: a backend whose limiter loads
// from Tollgate rebuilds the credit grants Redis lost from Tollgate's
// ledger (remote.Client.Grants as GrantLoader) before it decides: with its
// 5 included units used, exactly the 3 units the ledger says remain are
// admitted after the loss, never the grant's whole amount again, and never
// none. A malformed answer is an error, not free units.
func TestRemoteGrantsRebuildAfterRedisLoss(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	f, r := remoteFixture(t)
	f.used.Store(5)
	exp := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	f.grants.Store(`{"tenant_id":"acme","grants":[{"id":"g1","meter":"requests","effective_at":"` + from + `","expires_at":"` + exp + `","remaining":3}]}`)
	gs, err := r.Grants(ctx, "acme")
	if err != nil || len(gs) != 1 || gs[0].ID != "g1" || gs[0].Remaining != 3 || gs[0].ExpiresAt.IsZero() {
		t.Fatalf("Grants = %+v, %v", gs, err)
	}
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: r.Snapshot, UsageLoader: r.Usage, GrantLoader: r.Grants})
	admitted := 0
	for i := 0; i < 10; i++ {
		d, err := l.Allow(ctx, "acme", limiter.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d with 5 of 5 included used and 3 left in the grant, want 3", admitted)
	}
	for _, bad := range []string{`{"tenant_id":"acme"}`, `{"grants":[{"id":"","meter":"requests","remaining":1}]}`, `{"grants":[{"id":"g","meter":"requests","remaining":-1}]}`} {
		f.grants.Store(bad)
		if _, err := r.Grants(ctx, "acme"); err == nil {
			t.Errorf("Grants accepted %s", bad)
		}
	}
	if _, err := r.Grants(ctx, "globex"); !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Errorf("grants of an unknown tenant: %v", err)
	}
}

// TestRemoteRetries: a 503 or a timeout is retried up to Attempts, a 4xx is
// not; after the last attempt, calls fail at once for Cooldown.
func TestRemoteRetries(t *testing.T) {
	ctx := context.Background()
	f, r := remoteFixture(t)

	f.status.Store(http.StatusServiceUnavailable)
	go func() { // Tollgate comes back after the first attempts
		for f.calls.Load() < 2 {
			time.Sleep(time.Millisecond) // polling interval
		}
		f.status.Store(0)
	}()
	if _, err := r.Snapshot(ctx, "acme"); err != nil {
		t.Fatalf("503 then 200: %v", err)
	}
	if n := f.calls.Load(); n < 2 || n > 3 {
		t.Fatalf("%d calls, want 2-3", n)
	}

	f.calls.Store(0)
	f.status.Store(http.StatusBadRequest)
	if _, err := r.Snapshot(ctx, "acme"); err == nil || errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("400: %v", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("a 400 was tried %d times", n)
	}

	f.calls.Store(0)
	f.status.Store(0)
	f.delay.Store(int64(time.Second)) // past the 200ms Timeout
	start := time.Now()
	_, err := r.Snapshot(ctx, "acme")
	if err == nil || errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("timeout: %v", err)
	}
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("three attempts of 200ms took %v", took)
	}
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	// Cooldown: the next call does not reach Tollgate.
	f.delay.Store(0)
	if _, err := r.Snapshot(ctx, "acme"); err == nil {
		t.Fatal("a call during the cooldown succeeded")
	}
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("called during the cooldown (%d calls)", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.Snapshot(ctx, "acme"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never back after the cooldown")
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// TestRemoteDownFailModes: when Tollgate does not answer and the tenant is
// not in Redis, the fail modes decide (open by default, 503 with a closed
// quota) instead of an error.
func TestRemoteDownFailModes(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	f, r := remoteFixture(t)
	f.status.Store(http.StatusBadGateway)
	var loaderErrs atomic.Int64
	hooks := limiter.Hooks{OnLoaderError: func(string, error) { loaderErrs.Add(1) }}
	open := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: r.Snapshot, Hooks: hooks})
	d, err := open.Allow(ctx, "acme", limiter.Request{})
	if err != nil || !d.Allowed || d.Fallback != limiter.FailOpen {
		t.Fatalf("default fail modes: %+v %v", d, err)
	}
	if loaderErrs.Load() == 0 {
		t.Fatal("OnLoaderError not called")
	}
	closed := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: r.Snapshot,
		FailMode: limiter.FailModes{Quota: limiter.FailClosed}})
	if _, err := closed.Allow(ctx, "acme", limiter.Request{}); !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("closed quota: %v", err)
	}
}

func TestNewRemoteBadInput(t *testing.T) {
	for _, c := range []struct{ url, token string }{{"", "t"}, {"ftp://x", "t"}, {"http://", "t"}, {"http://x", ""}} {
		if _, err := remote.New(c.url, c.token, remote.Options{}); err == nil {
			t.Errorf("NewRemote(%q, %q) accepted", c.url, c.token)
		}
	}
	if _, err := remote.New("http://x", "t", remote.Options{Attempts: -1}); err == nil {
		t.Error("negative Attempts accepted")
	}
}
