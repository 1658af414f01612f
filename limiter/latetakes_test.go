package limiter_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// A decision lost while Redis stalls (answered "retry") still takes its
// unit when Redis resumes, and gives it back when its answer comes. The
// client's retry, decided by Redis right after the lost script, must not
// be refused for that unit: a hard quota's 429 carries the period's end as
// Retry-After, and a well-behaved client would stop for the month with its
// quota unused. The refusal waits for the late take's refund and is
// decided again: the retry is admitted, the next request refused, and
// Redis counts the two units admitted.
func TestRetryAfterALostDecisionIsNotRefusedForItsUnits(t *testing.T) {
	for _, mode := range []limiter.FailMode{limiter.FailLocal, limiter.FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			srv, rdb, st, s := privateQuota(t, "one", 2)
			ctx := context.Background()
			l := newLimiter(t, rdb, limiter.Options{Timeout: 30 * time.Millisecond, FailMode: limiter.FailModes{Quota: mode}})
			// One unit taken: the snapshot and script cached, a connection open.
			if d, err := l.Allow(ctx, "one", limiter.Request{Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("first: %+v %v", d, err)
			}
			// The cached snapshot confirmed by the subscription, so that
			// the stalled call is the decision's script, not a read of it.
			limitertest.Eventually(t, 10*time.Second, "the snapshot cached", func() bool {
				_, _ = l.Allow(ctx, "one", limiter.Request{Peek: true})
				return limiter.SnapshotCached(l, "one")
			})
			if err := srv.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			_, err := l.Allow(ctx, "one", limiter.Request{Cost: 1})
			if err := srv.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(err, limiter.ErrUnavailable) {
				t.Fatalf("a decision while Redis stalls: %v, want ErrUnavailable (retry)", err)
			}
			// The retry, at once: Redis runs the lost script first.
			var d *limiter.Decision
			for i := 0; ; i++ {
				d, err = l.Allow(ctx, "one", limiter.Request{Cost: 1})
				if !errors.Is(err, limiter.ErrUnavailable) || i == 20 {
					break
				}
				time.Sleep(20 * time.Millisecond) // Redis is judged down for a moment: retry
			}
			if err != nil || !d.Allowed {
				t.Fatalf("the retry of a lost decision with 1 unit left: %+v %v; want admitted", d, err)
			}
			if d, err := l.Allow(ctx, "one", limiter.Request{Cost: 1}); err != nil || d.Allowed {
				t.Fatalf("the next request: %+v %v; want refused", d, err)
			}
			used, _, err := st.Used(ctx, "one", "requests", s.PeriodStart)
			if err != nil || used != 2 {
				t.Fatalf("Redis counts %d (%v), want the 2 units admitted", used, err)
			}
		})
	}
}
