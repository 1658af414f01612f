package limiter

import (
	"testing"
	"time"
)

// feed runs n decisions of latency rtt through a, concurrency at a time,
// on a clock of its own (start times shifted back by rtt).
func feed(a *adaptiveLimit, n, concurrency int, rtt time.Duration) (shed int) {
	for i := 0; i < n; i += concurrency {
		var starts []time.Time
		for j := 0; j < concurrency; j++ {
			if _, ok := a.acquire(); ok {
				starts = append(starts, time.Now().Add(-rtt))
			} else {
				shed++
			}
		}
		for _, s := range starts {
			a.release(s)
		}
		time.Sleep(time.Millisecond) // windows are 50 ms of wall time
	}
	return shed
}

// The adaptive limit grows while latency holds and the limit is used,
// shrinks when decisions queue (latency well above its long-run value),
// never below its floor or above MaxInFlight, and sheds what is over it.
func TestAdaptiveLimitFollowsLatency(t *testing.T) {
	a := newAdaptiveLimit(500)
	start := a.limit.Load()
	feed(a, 20000, 60, time.Millisecond)
	grown := a.limit.Load()
	if grown <= start {
		t.Fatalf("limit %d after steady latency at full use, want above the initial %d", grown, start)
	}
	feed(a, 20000, 60, 20*time.Millisecond)
	shrunk := a.limit.Load()
	if shrunk >= grown/2 {
		t.Fatalf("limit %d after latency rose 20x, want well under %d", shrunk, grown)
	}
	if shrunk < adaptiveMin {
		t.Fatalf("limit %d under the floor %d", shrunk, adaptiveMin)
	}
	if shed := feed(a, 1000, int(shrunk)+10, 20*time.Millisecond); shed == 0 {
		t.Fatalf("%d at once over a limit of %d: nothing shed", shrunk+10, shrunk)
	}
	b := newAdaptiveLimit(40)
	feed(b, 20000, 60, time.Millisecond)
	if l := b.limit.Load(); l > 40 {
		t.Fatalf("limit %d over MaxInFlight 40", l)
	}
}
