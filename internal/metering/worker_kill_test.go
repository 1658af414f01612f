package metering

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// buildWorker builds cmd/worker once per test binary.
func buildWorker(t *testing.T) string {
	t.Helper()
	return testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")
}

// The worker runs as a real process against the package database and a
// Redis of the test's own; it is killed with SIGKILL while it flushes
// (a claimed, unacknowledged batch is in Redis), three times, while the
// limiter keeps admitting requests. After the last restart the durable
// totals equal the admitted decisions exactly.
func TestWorkerSIGKILLDuringFlushKeepsTotalsExact(t *testing.T) {
	// Not parallel: its worker process runs every periodic job (period
	// close, Stripe report, retention) over the package's database.
	if testing.Short() {
		t.Skip("builds and runs cmd/worker")
	}
	db := pgtest.New(t)
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	b := newBundle(t, db, rdb, keyspace.DefaultPrefix)
	bin := buildWorker(t)

	const tenants = 12
	ids := make([]string, tenants)
	starts := make([]time.Time, tenants)
	for i := range ids {
		ids[i] = b.newTenant(t, time.Now().Add(-time.Hour))
		snap := b.putSnapshot(t, ids[i], 1, map[string]limiter.Quota{"requests": {Limit: 1 << 40, Mode: "hard"}, "tokens": {Limit: 1 << 40, Mode: "soft"}})
		starts[i] = snap.PeriodStart
	}
	lim, err := limiter.New(rdb, limiter.Options{UsageLoader: b.svc.LoadUsage, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()

	ctx, stop := context.WithCancel(context.Background())
	var admitted [tenants][2]atomic.Int64
	var wg sync.WaitGroup
	meters := []string{"requests", "tokens"}
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				ti, mi := (g+i)%tenants, i%2
				d, err := lim.Allow(context.Background(), ids[ti], limiter.Request{Cost: int64(1 + i%3), Meter: meters[mi]})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[ti][mi].Add(int64(1 + i%3))
				}
			}
		}(g)
	}

	env := []string{"DATABASE_URL=" + pgtest.URL(t), "REDIS_URL=redis://" + srv.Addr + "/0", "MIGRATE_ON_START=false",
		"FLUSH_INTERVAL=100ms", "LOG_LEVEL=warn", "STRIPE_SECRET_KEY=", "STRIPE_WEBHOOK_SECRET="}
	flushing := func() bool { // a pending claim (ci:<counter> ≠ ca:<counter>) in a tenant's state hash
		for _, id := range ids {
			h, _ := rdb.HGetAll(context.Background(), b.store.Keys().State(id)).Result()
			for f, v := range h {
				if sfx, ok := strings.CutPrefix(f, "ci:"); ok && v != h["ca:"+sfx] {
					return true
				}
			}
		}
		return false
	}
	durableTotal := func() int64 {
		return b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = ANY($1::uuid[])`, ids)
	}
	killedDuringFlush := 0
	for round := 0; round < 3; round++ {
		w := testkit.StartWorker(t, bin, env)
		before := durableTotal()
		testkit.Eventually(t, 30*time.Second, "the worker to flush", func() bool { return durableTotal() > before })
		// Kill it at a moment when a claim is outstanding.
		deadline := time.Now().Add(5 * time.Second)
		for !flushing() && time.Now().Before(deadline) {
		}
		if flushing() {
			killedDuringFlush++
		}
		w.Kill()
	}
	stop()
	wg.Wait()
	if killedDuringFlush == 0 {
		t.Fatal("never caught the worker with a claim outstanding")
	}
	t.Logf("killed during a flush %d of 3 times", killedDuringFlush)

	w := testkit.StartWorker(t, bin, env)
	var want int64
	for i := range ids {
		want += admitted[i][0].Load() + admitted[i][1].Load()
	}
	testkit.Eventually(t, 30*time.Second, "every admitted unit flushed", func() bool { return durableTotal() >= want })
	w.Kill()
	for i, id := range ids {
		for mi, m := range meters {
			if got, want := b.durable(t, id, m, starts[i]), admitted[i][mi].Load(); got != want {
				t.Errorf("tenant %d %s: durable %d, admitted %d", i, m, got, want)
			}
		}
	}
	if got := durableTotal(); got != want {
		t.Fatalf("durable total %d, admitted %d", got, want)
	}
	if got := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_hourly WHERE tenant_id = ANY($1::uuid[])`, ids); got != want {
		t.Fatalf("hourly history total %d, admitted %d", got, want)
	}
}
