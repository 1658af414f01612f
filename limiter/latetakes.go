package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lateTakes counts, per tenant, the decisions whose caller stopped waiting
// (answered "retry") while their script may still take units in Redis.
// Such units are given back when the late answer comes (lateDecision), but
// a client's retry can be decided before that: it then finds the quota
// short by exactly the units the lost try is about to return, and a 429
// with a hard quota's Retry-After (the period's end) would send a
// well-behaved client away for the month. A refusal of a tenant with late
// takes in flight, or decided while one ended (its refund may have reached
// Redis just after the refusal was decided), waits for them (at most the
// hard wait) and is decided once more.
type lateTakes struct {
	mu sync.Mutex
	m  map[string]*lateCount
	// ends counts late takes ended (their refunds written), of any
	// tenant: a decision compares it before and after.
	ends atomic.Uint64
	// refunds counts late answers that had taken units and gave them back.
	refunds atomic.Uint64
}

type lateCount struct {
	n    int
	done chan struct{} // closed when n drops to 0
}

func (t *lateTakes) begin(tenant string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*lateCount{}
	}
	c := t.m[tenant]
	if c == nil {
		c = &lateCount{done: make(chan struct{})}
		t.m[tenant] = c
	}
	c.n++
}

func (t *lateTakes) end(tenant string) {
	t.ends.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.m[tenant]
	if c == nil {
		return
	}
	if c.n--; c.n <= 0 {
		close(c.done)
		delete(t.m, tenant)
	}
}

// epoch is what wait compares with: read it before a decision.
func (t *lateTakes) epoch() uint64 { return t.ends.Load() }

// wait says whether a decision begun at epoch may have been refused for
// units a late take gives back: one of tenant's is in flight (then it
// waits until they end, within passes or ctx ends), or one ended since.
func (t *lateTakes) wait(ctx context.Context, tenant string, epoch uint64, within time.Duration) bool {
	t.mu.Lock()
	c := t.m[tenant]
	t.mu.Unlock()
	if c == nil {
		return t.ends.Load() != epoch
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	return true
}

// afterLateTakes redecides a refusal once when late takes of its tenant
// were in flight (see lateTakes): their refunds reach Redis first.
func (l *Limiter) afterLateTakes(ctx context.Context, pl *plan, req *Request, d *Decision, epoch uint64) *Decision {
	if d.Allowed || req.Peek || !l.late.wait(ctx, pl.tenant, epoch, l.hardWait()) || ctx.Err() != nil {
		return d
	}
	// The first decision counted its refusal already: the second one's
	// is not counted again (as a refused lease take is not).
	redo := *req
	redo.leaseTake = true
	again, err := l.decide(ctx, pl, &redo, nil)
	if err != nil {
		fellBack(err, nil) // the refusal stands; a late take of this try is given back too
		return d
	}
	if again.Fallback != "" {
		return d
	}
	return again
}
