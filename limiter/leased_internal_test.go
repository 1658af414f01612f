package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"
)

// A remainder whose return is made again (a retry after a reply lost on
// the way back) is refunded once: the return's mark in Redis refuses the
// second. Without it, the second refund would let instances admit past
// the limit.
func TestLeaseReturnRetriedIsRefundedOnce(t *testing.T) {
	rdb, prefix := redisproc.New(t)
	now := time.Now().UTC()
	const quota = 1000
	snap := Snapshot{TenantID: "retry", Plan: "p", Status: "active", Version: 1,
		Rate:        &Rate{PerSecond: 1e6, Burst: 1e6},
		Quotas:      map[string]Quota{"requests": {Limit: quota, Mode: ModeHard}},
		PeriodStart: now.Add(-time.Hour), PeriodEnd: now.Add(24 * time.Hour), NextPeriodEnd: now.Add(48 * time.Hour)}
	opts := Options{Prefix: prefix, Timeout: 5 * time.Second, Prefetch: true,
		Loader: func(context.Context, string) (Snapshot, error) { return snap, nil }}
	l, err := New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if d, err := l.Allow(ctx, "retry", Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	// Take the pool's remainder out as a revocation does, and give it back
	// twice under one id.
	ls := l.leases
	for _, p := range ls.all() {
		p.mu.Lock()
		p.dead = true
		ls.queue(p.key.tenant, p.detachLocked())
		p.mu.Unlock()
		ls.forget(p)
	}
	ls.retMu.Lock()
	rs := append([]leaseReturn(nil), ls.returns...)
	ls.retMu.Unlock()
	if len(rs) != 1 || rs[0].left <= 0 {
		t.Fatalf("returns %+v, want one remainder", rs)
	}
	for round := 0; round < 2; round++ {
		if failed := ls.giveBackBatch(ctx, rs); len(failed) != 0 {
			t.Fatalf("round %d: %d returns failed", round, len(failed))
		}
	}
	exact, err := New(rdb, Options{Prefix: prefix, Timeout: 5 * time.Second, Loader: opts.Loader, DisableRefusalCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	d, err := exact.Allow(ctx, "retry", Request{Cost: 1, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	if used := quota - d.Policies[1].Remaining; used != 10 {
		t.Fatalf("Redis counts %d used after 10 admitted and the remainder given back twice, want 10", used)
	}
}
