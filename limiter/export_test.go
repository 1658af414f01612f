package limiter

import "context"

// GeneralScript makes a limiter decide every plan with the general
// decision script (decideBody), so that tests can compare it with the
// common plan's flat one (fastBody).
func GeneralScript(o Options) Options {
	o.generalScript = true
	return o
}

// RefShapes returns how many shapes of decisions by reference l keeps.
func RefShapes(l *Limiter) int {
	if m := l.refShapes.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// FlushRefusals adds the refusals decided without Redis to Redis at once
// (the Limiter does it every second), so that tests need not wait a tick.
func FlushRefusals(l *Limiter, ctx context.Context) error { return l.flushRefusals(ctx) }

// SnapshotCached says whether tenant's snapshot would be decided on from
// the near-cache as it is (no read of Redis first).
func SnapshotCached(l *Limiter, tenant string) bool { return l.cache.isFresh(tenant) }

// LateRefunds counts the late answers that had taken units and gave them
// back (lateDecision.reconcile).
func LateRefunds(l *Limiter) uint64 { return l.late.refunds.Load() }
