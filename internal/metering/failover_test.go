package metering

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// failoverRig is a master and a replica of the test's own, every client
// (the worker's store, two limiters) reaching them through a Switch, and
// Postgres: the setup of issue 22's failover.
type failoverRig struct {
	b       *bundle
	master  *redistest.Server
	replica *redistest.Server
	sw      *redistest.Switch
	lims    []*limiter.Limiter
}

func newFailoverRig(t *testing.T) *failoverRig {
	if testing.Short() {
		t.Skip("private redis-servers")
	}
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sw := redistest.NewSwitch(master.Addr)
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: "redis-master", Dialer: sw.Dialer, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	r := &failoverRig{master: master, replica: replica, sw: sw}
	r.b = newBundle(t, pgtest.New(t), client(), redistest.Prefix())
	for i := 0; i < 2; i++ { // two api instances, each its own client
		lim, err := limiter.New(client(), limiter.Options{Prefix: r.b.prefix, Timeout: 2 * time.Second,
			ExpectedInstances: 2,
			// A decision Redis cannot make is refused, never admitted
			// uncounted: the test counts every admission.
			FailMode:    limiter.FailModes{Quota: limiter.FailClosed, Rate: limiter.FailClosed},
			UsageLoader: r.b.svc.LoadUsage})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		r.lims = append(r.lims, lim)
	}
	return r
}

// tenant makes a tenant with a hard quota of limit and a rate that never
// refuses (the common plan: the fast script).
func (r *failoverRig) tenant(t *testing.T, limit int64) limitstore.PendingKey {
	tenant := r.b.newTenant(t, time.Now().Add(-24*time.Hour))
	tp, err := loadTenantPeriods(r.b.ctx, r.b.db, tenant)
	if err != nil {
		t.Fatal(err)
	}
	p := tp.at(time.Now())
	snap := limiter.Snapshot{TenantID: tenant, Plan: "test", Status: "active", Version: 1,
		Rate:        &limiter.Rate{PerSecond: 1e6, Burst: 1e6},
		Quotas:      map[string]limiter.Quota{"requests": {Limit: limit, Mode: "hard"}},
		PeriodStart: p.Start, PeriodEnd: p.End, NextPeriodEnd: tp.at(p.End).End}
	if err := r.b.store.PutSnapshot(r.b.ctx, snap); err != nil {
		t.Fatal(err)
	}
	return limitstore.PendingKey{Tenant: tenant, Meter: "requests", PeriodStart: p.Start}
}

// drive makes n decisions for the tenant from 32 goroutines over both
// limiters and returns how many were admitted. Errors (Redis moving) are
// not admissions.
func (r *failoverRig) drive(k limitstore.PendingKey, n int) int64 {
	var admitted, next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(lim *limiter.Limiter) {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				d, err := lim.Allow(r.b.ctx, k.Tenant, limiter.Request{Cost: 1})
				if err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
		}(r.lims[g%2])
	}
	wg.Wait()
	return admitted.Load()
}

// flushUntilCaughtUp flushes until Postgres holds want for the counter.
func (r *failoverRig) flushUntilCaughtUp(t *testing.T, k limitstore.PendingKey, want int64) {
	t.Helper()
	redistest.WaitFor(t, 30*time.Second, "Postgres to catch up", func() bool {
		if _, err := r.b.svc.FlushOnce(r.b.ctx); err != nil {
			t.Logf("flush: %v", err)
		}
		return r.b.durable(t, k.Tenant, k.Meter, k.PeriodStart) == want
	})
}

// TestFailoverRollbackNeverFreesQuotaNorBillsTwice is issue 22's failover:
// the replica is cut off with part of the usage unflushed, the master goes
// on (Postgres catches up with it), then dies and the replica, whose
// counters, flushed marks and claims are older than Postgres's, is
// promoted and takes the traffic. A tenant not exhausted is admitted
// exactly its quota in all, and a tenant exhausted before the failover
// nothing more; Postgres holds exactly what was admitted (nothing was
// admitted in the gap that no flush saw: the master was flushed before
// it died).
func TestFailoverRollbackNeverFreesQuotaNorBillsTwice(t *testing.T) {
	r := newFailoverRig(t)
	open, full := r.tenant(t, 500), r.tenant(t, 300)

	// Before the cut: flushed, then some more not flushed yet.
	a := r.drive(open, 150) + r.drive(full, 100)
	if a != 250 {
		t.Fatalf("admitted %d before the cut, want 250", a)
	}
	r.flushUntilCaughtUp(t, open, 150)
	r.flushUntilCaughtUp(t, full, 100)
	admittedOpen, admittedFull := 150+r.drive(open, 50), 100+r.drive(full, 50)
	redistest.WaitReplicated(t, r.master)
	redistest.CutReplication(t, r.replica)

	// The master goes on, alone: Postgres catches up with it.
	admittedOpen += r.drive(open, 230)
	admittedFull += r.drive(full, 400) // exhausted: 150 more, then refused
	if admittedOpen != 430 || admittedFull != 300 {
		t.Fatalf("admitted %d and %d on the master, want 430 and 300", admittedOpen, admittedFull)
	}
	r.flushUntilCaughtUp(t, open, admittedOpen)
	r.flushUntilCaughtUp(t, full, admittedFull)

	// The master dies; the replica, 230 and 200 behind, is promoted.
	r.master.Kill()
	redistest.Promote(t, r.replica)
	r.sw.Point(r.replica.Addr)

	admittedOpen += r.drive(open, 1000)
	admittedFull += r.drive(full, 1000)
	if admittedOpen > 500 || admittedFull > 300 {
		t.Errorf("admitted %d of 500 and %d of 300: the rollback handed quota back", admittedOpen, admittedFull)
	}
	for _, c := range []struct {
		k    limitstore.PendingKey
		want int64
	}{{open, admittedOpen}, {full, admittedFull}} {
		var got int64
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := r.b.svc.FlushOnce(r.b.ctx); err != nil {
				t.Logf("flush: %v", err)
			}
			got = r.b.durable(t, c.k.Tenant, c.k.Meter, c.k.PeriodStart)
			if n, err := r.b.store.Unflushed(r.b.ctx, c.k.Tenant, c.k.Meter, c.k.PeriodStart); err == nil && n == 0 && got == c.want {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
		if got != c.want {
			t.Errorf("Postgres has %d, admitted %d: billed what was not admitted", got, c.want)
		}
	}
	t.Logf("admitted %d of 500, %d of 300", admittedOpen, admittedFull)
}
