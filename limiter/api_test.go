package limiter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
)

// TestZeroCostTakesOne: the zero Request enforces (a forgotten Cost is 1),
// and only an explicit Peek takes nothing.
func TestZeroCostTakesOne(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	st := newStore(b.client(), b.prefix)
	put(t, st, snapshot("zero", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 2, Mode: limiter.ModeHard}}
	}))
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second})
	for i := 0; i < 5; i++ { // peeks never take
		d, err := l.Allow(ctx, "zero", limiter.Request{Peek: true})
		if err != nil || !d.Allowed || d.Policies[0].Remaining != 2 {
			t.Fatalf("peek %d: %+v %v", i, d, err)
		}
	}
	// A peek of cost 3 asks about 3 units: refused, nothing counted.
	if d, err := l.Allow(ctx, "zero", limiter.Request{Peek: true, Cost: 3}); err != nil || d.Allowed {
		t.Fatalf("peek of cost 3 over a quota of 2: %+v %v", d, err)
	}
	for i, want := range []bool{true, true, false} {
		d, err := l.Allow(ctx, "zero", limiter.Request{})
		if err != nil || d.Allowed != want {
			t.Fatalf("zero request %d: %+v %v, want allowed=%v", i, d, err, want)
		}
	}
	if n, _, _ := st.Used(ctx, "zero", "requests", snapshot("", nil).PeriodStart); n != 2 {
		t.Fatalf("counted %d, want 2", n)
	}
	if m, _ := st.Refusals(ctx, "zero", time.Now()); m["requests"] != 1 {
		t.Fatalf("refusals %v: the peek must not count, the real refusal must", m)
	}
	if _, err := l.Allow(ctx, "zero", limiter.Request{Cost: -1}); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("negative cost: %v", err)
	}
}

// TestPeekExplicitLimits: with explicit limits too a peek takes no token
// and an unset cost takes one.
func TestPeekExplicitLimits(t *testing.T) {
	b := singleRedis(t)
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second})
	x := &limiter.Limits{Rate: &limiter.Rate{PerSecond: 0.001, Burst: 2}}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if d, err := l.Allow(ctx, "ip:1", limiter.Request{Peek: true, Limits: x}); err != nil || !d.Allowed {
			t.Fatalf("peek %d: %+v %v", i, d, err)
		}
	}
	for i, want := range []bool{true, true, false} {
		if d, err := l.Allow(ctx, "ip:1", limiter.Request{Limits: x}); err != nil || d.Allowed != want {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
	}
}

// TestClosed: after Close, Allow is ErrClosed (Close may be called again)
// and the middleware answers 503, not 500.
func TestClosed(t *testing.T) {
	b := singleRedis(t)
	l, err := limiter.New(b.client(), limiter.Options{Prefix: b.prefix, Batching: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	x := &limiter.Limits{Rate: &limiter.Rate{PerSecond: 1, Burst: 1}}
	if _, err := l.Allow(context.Background(), "k", limiter.Request{Limits: x}); !errors.Is(err, limiter.ErrClosed) {
		t.Fatalf("Allow after Close: %v", err)
	}
	h := limithttp.Middleware(l, func(*http.Request) (string, limiter.Request, error) {
		return "k", limiter.Request{Limits: x}, nil
	})(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("middleware after Close: %d %v", rec.Code, rec.Header())
	}
}

// TestTypedFallback: a decision made without Redis says so with the fail
// mode that decided (Decision.Fallback is a FailMode, "" when Redis did).
func TestTypedFallback(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	put(t, newStore(b.client(), b.prefix), snapshot("fb", func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 10, Burst: 10}
	}))
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second})
	d, err := l.Allow(ctx, "fb", limiter.Request{})
	if err != nil || d.Fallback != "" {
		t.Fatalf("%+v %v", d, err)
	}
	var m limiter.QuotaMode = limiter.ModeSoft
	if m != "soft" || limiter.FailLocal != "local" || limiter.FailOpen != "open" {
		t.Fatal("typed constants changed their wire values")
	}
}
