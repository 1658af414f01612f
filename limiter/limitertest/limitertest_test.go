package limitertest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// TestKit runs the kit the way a backend's test would: a snapshot put
// where Tollgate's server puts it, decisions asserted, usage and refusals
// read back, and the prefix empty after Clean.
func TestKit(t *testing.T) {
	rdb, prefix := limitertest.Redis(t)
	snap := limitertest.Snapshot("acme", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"exports": {Limit: 2, Mode: limiter.ModeHard}}
	})
	limitertest.PutSnapshot(t, rdb, prefix, snap)
	l := limitertest.New(t, rdb, limiter.Options{Prefix: prefix, Timeout: 5 * time.Second})
	d := limitertest.Allowed(t, l, "acme", limiter.Request{Meter: "exports"})
	if n := limitertest.Remaining(t, d, "exports"); n != 1 {
		t.Fatalf("remaining %d, want 1", n)
	}
	limitertest.Allowed(t, l, "acme", limiter.Request{Meter: "exports"})
	limitertest.Refused(t, l, "acme", limiter.Request{Meter: "exports"}, "exports")
	if n := limitertest.Used(t, rdb, prefix, "acme", "exports", snap.PeriodStart); n != 2 {
		t.Fatalf("used %d, want 2", n)
	}
	limitertest.Eventually(t, 10*time.Second, "the refusal counted", func() bool {
		return limitertest.Refusals(t, rdb, prefix, "acme", time.Now())["exports"] == 1
	})

	// A newer version replaces the plan at once (the limiter follows the
	// announcement); an older one is ignored.
	snap.Version, snap.Quotas = 2, map[string]limiter.Quota{"exports": {Limit: 5}}
	limitertest.PutSnapshot(t, rdb, prefix, snap)
	limitertest.Eventually(t, 10*time.Second, "the new plan in force", func() bool {
		d, err := l.Allow(context.Background(), "acme", limiter.Request{Meter: "exports", Peek: true})
		return err == nil && d.Allowed
	})
	old := snap
	old.Version, old.Quotas = 1, map[string]limiter.Quota{"exports": {Limit: 0}}
	limitertest.PutSnapshot(t, rdb, prefix, old)
	limitertest.Allowed(t, l, "acme", limiter.Request{Meter: "exports"})

	limitertest.Clean(context.Background(), rdb, prefix)
	if keys, err := rdb.Keys(context.Background(), prefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("after Clean: %v %v", keys, err)
	}
}

// TestSnapshots: the in-memory loader hands out what it holds, counts its
// calls, and answers ErrUnknownTenant for the rest.
func TestSnapshots(t *testing.T) {
	rdb, prefix := limitertest.Redis(t)
	snaps := limitertest.NewSnapshots(limitertest.Snapshot("a", func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 0.001, Burst: 1}
	}))
	l := limitertest.New(t, rdb, limiter.Options{Prefix: prefix, Loader: snaps.Load, Timeout: 5 * time.Second})
	limitertest.Allowed(t, l, "a", limiter.Request{})
	limitertest.Refused(t, l, "a", limiter.Request{}, limiter.PolicyRate)
	if _, err := l.Allow(context.Background(), "b", limiter.Request{}); err == nil || !errors.Is(err, limiter.ErrUnknownTenant) {
		t.Fatalf("unknown tenant: %v", err)
	}
	if snaps.Calls("a") < 1 || snaps.Calls("b") != 1 {
		t.Fatalf("calls a=%d b=%d", snaps.Calls("a"), snaps.Calls("b"))
	}
}

// recorder is a testing.TB whose Fatalf records the failure and ends the
// goroutine, as testing's does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestAssertionsFail: each assertion fails the test on the other outcome,
// naming what it got.
func TestAssertionsFail(t *testing.T) {
	allowed := stub{d: &limiter.Decision{Allowed: true, Policies: []limiter.PolicyStatus{{Name: "rate", Remaining: 3}}}}
	refused := stub{d: &limiter.Decision{Policy: "rate", RetryAfter: time.Second}}
	for name, f := range map[string]func(tb testing.TB){
		"Refused on an admission":   func(tb testing.TB) { limitertest.Refused(tb, allowed, "x", limiter.Request{}, "") },
		"Allowed on a refusal":      func(tb testing.TB) { limitertest.Allowed(tb, refused, "x", limiter.Request{}) },
		"Refused by another policy": func(tb testing.TB) { limitertest.Refused(tb, refused, "x", limiter.Request{}, "requests") },
		"Remaining of an unchecked": func(tb testing.TB) { limitertest.Remaining(tb, allowed.d, "requests") },
		"Allowed on an error": func(tb testing.TB) {
			limitertest.Allowed(tb, stub{err: limiter.ErrUnavailable}, "x", limiter.Request{})
		},
		"Eventually on a false cond.": func(tb testing.TB) {
			limitertest.Eventually(tb, 20*time.Millisecond, "never", func() bool { return false })
		},
	} {
		r := &recorder{TB: t}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); f(r) }()
		wg.Wait()
		if r.failed == "" {
			t.Errorf("%s: did not fail", name)
		}
	}
	// And each passes on its own outcome.
	limitertest.Allowed(t, allowed, "x", limiter.Request{})
	limitertest.Refused(t, refused, "x", limiter.Request{}, "rate")
	if limitertest.Remaining(t, allowed.d, "rate") != 3 {
		t.Fatal("Remaining")
	}
}

type stub struct {
	d   *limiter.Decision
	err error
}

func (s stub) Allow(context.Context, string, limiter.Request) (*limiter.Decision, error) {
	return s.d, s.err
}
