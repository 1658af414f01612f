package limiter

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// adaptiveLimit bounds the decisions in progress by a limit that follows
// their latency, in the manner of TCP Vegas and Netflix's gradient limiter:
// while the recent latency stays near the long-run one the limit grows (by
// about its square root per window), and when decisions queue (the recent
// latency rises above the long-run one: CPU or connections saturated) it
// shrinks in proportion. What is over the limit is shed at once
// (ErrOverloaded, a 503 with Retry-After), before it costs anything, so
// that the decisions admitted keep their latency instead of every decision
// waiting past its deadline and falling to the fail modes.
type adaptiveLimit struct {
	inFlight atomic.Int64
	limit    atomic.Int64

	mu      sync.Mutex
	max     float64
	cur     float64 // the limit before rounding
	longRTT float64 // EWMA over ~adaptiveLongWindows windows, seconds
	sum     float64 // this window's latencies
	n       int
	peak    int64 // most in flight this window
	since   time.Time
}

const (
	adaptiveMin         = 8
	adaptiveInitial     = 64
	adaptiveMaxDef      = 1000
	adaptiveWindow      = 50 * time.Millisecond
	adaptiveLongWindows = 20
	// adaptiveTolerance is how much slower than the long-run latency the
	// recent one may be before the limit shrinks.
	adaptiveTolerance = 1.5
)

// newAdaptiveLimit returns a limit bounded above by max (MaxInFlight; 0:
// adaptiveMaxDef).
func newAdaptiveLimit(max int) *adaptiveLimit {
	if max <= 0 {
		max = adaptiveMaxDef
	}
	a := &adaptiveLimit{max: float64(max), cur: math.Min(adaptiveInitial, float64(max)), since: time.Now()}
	a.limit.Store(int64(a.cur))
	return a
}

// acquire takes a place among the decisions in progress, or says there is
// none.
func (a *adaptiveLimit) acquire() (time.Time, bool) {
	n := a.inFlight.Add(1)
	if n > a.limit.Load() {
		a.inFlight.Add(-1)
		return time.Time{}, false
	}
	return time.Now(), true
}

// release gives the place back and feeds the decision's latency to the
// limit.
func (a *adaptiveLimit) release(start time.Time) {
	now := time.Now()
	n := a.inFlight.Add(-1) + 1
	rtt := now.Sub(start).Seconds()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sum += rtt
	a.n++
	if n > a.peak {
		a.peak = n
	}
	if now.Sub(a.since) < adaptiveWindow || a.n < 10 {
		return
	}
	short := a.sum / float64(a.n)
	if a.longRTT == 0 {
		a.longRTT = short
	} else {
		// The long-run latency moves a twentieth per window (about a
		// second), so that queueing shows as short above long.
		a.longRTT += (short - a.longRTT) / adaptiveLongWindows
	}
	if a.longRTT/short > 2 {
		// Latency fell a lot (the load went away): forget the slow past.
		a.longRTT = short
	}
	gradient := math.Max(0.5, math.Min(1, adaptiveTolerance*a.longRTT/short))
	next := a.cur * gradient
	if gradient == 1 && float64(a.peak) >= a.cur/2 {
		// Only a limit that is used grows: an idle instance's limit would
		// otherwise climb to max and shed nothing when a burst comes.
		next += math.Sqrt(a.cur)
	}
	next = math.Max(adaptiveMin, math.Min(a.max, next))
	a.cur = a.cur*0.8 + next*0.2
	a.limit.Store(int64(math.Ceil(a.cur)))
	a.sum, a.n, a.peak, a.since = 0, 0, 0, now
}
