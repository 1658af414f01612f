package metering

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

func newLimiter(t testing.TB, b *bundle) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, UsageLoader: b.svc.LoadUsage,
		Timeout: time.Second, DisableRefusalCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

func admit(t testing.TB, b *bundle, lim *limiter.Limiter, tenant string, n int) (admitted int) {
	t.Helper()
	for i := 0; i < n; i++ {
		d, err := lim.Allow(b.ctx, tenant, limiter.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	return admitted
}

func TestFlushMovesCountersExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	snap := b.putSnapshot(t, tenant, 1, map[string]limiter.Quota{"requests": {Limit: 1000, Mode: "hard"}})
	lim := newLimiter(t, b)
	if got := admit(t, b, lim, tenant, 30); got != 30 {
		t.Fatalf("admitted %d", got)
	}
	st, err := b.svc.FlushOnce(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Units != 30 || st.Counters != 1 {
		t.Fatalf("flush = %+v, want 30 units of 1 counter", st)
	}
	if got := b.durable(t, tenant, "requests", snap.PeriodStart); got != 30 {
		t.Fatalf("durable = %d, want 30", got)
	}
	// Nothing new: nothing moves.
	if st, err := b.svc.FlushOnce(b.ctx); err != nil || st.Units != 0 {
		t.Fatalf("idle flush = %+v, %v", st, err)
	}

	// A crash after the commit and before the acknowledgement: the claim
	// is committed by hand, not acknowledged; the next pass replays it and
	// adds nothing more.
	admit(t, b, lim, tenant, 12)
	k := limitstore.PendingKey{Tenant: tenant, Meter: "requests", PeriodStart: snap.PeriodStart}
	c, ok, err := b.store.ClaimPending(b.ctx, k)
	if err != nil || !ok || c.N != 12 {
		t.Fatalf("claim = %+v %v %v", c, ok, err)
	}
	if out, st, err := b.svc.commitClaims(b.ctx, []FlushClaim{{ID: c.ID, Tenant: tenant, Meter: "requests", PeriodStart: snap.PeriodStart, N: c.N}}); err != nil || out[0] != commitCommitted || st.Units != 12 {
		t.Fatalf("manual commit: %v %+v %v", out, st, err)
	}
	// More decisions arrive while the claim is outstanding.
	admit(t, b, lim, tenant, 5)
	st, err = b.svc.FlushOnce(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Units != 0 {
		t.Fatalf("replayed claim added %d units, want 0", st.Units)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.durable(t, tenant, "requests", snap.PeriodStart); got != 30+12+5 {
		t.Fatalf("durable = %d, want 47", got)
	}
	// A crash before the commit: claimed, never committed; the next pass
	// commits it under the same id.
	admit(t, b, lim, tenant, 3)
	if _, ok, err := b.store.ClaimPending(b.ctx, k); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if st, err := b.svc.FlushOnce(b.ctx); err != nil || st.Units != 3 {
		t.Fatalf("flush after lost claim = %+v, %v; want 3 units", st, err)
	}
	if got := b.durable(t, tenant, "requests", snap.PeriodStart); got != 50 {
		t.Fatalf("durable = %d, want 50", got)
	}
	if n := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_hourly WHERE tenant_id = $1 AND meter = 'requests'`, tenant); n != 50 {
		t.Fatalf("hourly = %d, want 50", n)
	}
}

func TestFlushDropsUnknownTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ghost := "00000000-0000-4000-8000-" + randHex(6)
	start := time.Now().Truncate(time.Hour).UTC()
	c := keyspace.CounterOf("requests", start)
	if err := b.rdb.HSet(b.ctx, b.store.Keys().State(ghost), c.Used(), 4).Err(); err != nil {
		t.Fatal(err)
	}
	// Written without a dirty mark (a dirty set lost apart from the
	// hashes): a flush does not see it until the worker's start-up scan
	// adopts it.
	if st, err := b.svc.FlushOnce(b.ctx); err != nil || st.Dropped != 0 {
		t.Fatalf("flush before adoption = %+v, %v", st, err)
	}
	if n, err := b.store.AdoptUnmarked(b.ctx); err != nil || n != 1 {
		t.Fatalf("adopted %d, %v; want 1", n, err)
	}
	st, err := b.svc.FlushOnce(b.ctx)
	if err != nil || st.Dropped != 1 {
		t.Fatalf("flush = %+v, %v; want 1 dropped", st, err)
	}
	if h := b.rdb.HGetAll(b.ctx, b.store.Keys().State(ghost)).Val(); h["ci:"+c.Suffix] != h["ca:"+c.Suffix] || h[c.Used()] != h[c.Flushed()] {
		t.Fatalf("the dropped claim is still in Redis: %v", h)
	}
	if n := b.rdb.SCard(b.ctx, b.store.Keys().DirtyPending(ghost)).Val(); n != 0 {
		t.Fatalf("%d dirty marks left after the drop", n)
	}
}

// A tenant exhausted its hard quota; Redis loses everything (FLUSHALL on a
// server of the test's own); the counter is rebuilt from Postgres and the
// tenant is still refused, the totals unchanged.
func TestHardQuotaSurvivesFlushAll(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	b := newBundle(t, setup(t).db, rdb, "tg")
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	quotas := map[string]limiter.Quota{"requests": {Limit: 20, Mode: "hard"}}
	snap := b.putSnapshot(t, tenant, 1, quotas)
	lim := newLimiter(t, b)
	if got := admit(t, b, lim, tenant, 25); got != 20 {
		t.Fatalf("admitted %d, want 20", got)
	}
	// Usage events count too: 3 more units on the same meter, past the limit.
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("e1", "requests", 3, time.Now())}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.durable(t, tenant, "requests", snap.PeriodStart); got != 23 {
		t.Fatalf("durable before FLUSHALL = %d, want 23", got)
	}
	if err := rdb.FlushAll(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The snapshot is gone too: the server's loader would write it back.
	b.putSnapshot(t, tenant, 2, quotas)
	if got := admit(t, b, lim, tenant, 5); got != 0 {
		t.Fatalf("admitted %d after FLUSHALL, want 0 (the quota was exhausted)", got)
	}
	if n, ok, err := b.store.Used(b.ctx, tenant, "requests", snap.PeriodStart); err != nil || !ok || n != 23 {
		t.Fatalf("rebuilt counter = %d %v %v, want 23", n, ok, err)
	}
	if _, err := b.svc.FlushOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.durable(t, tenant, "requests", snap.PeriodStart); got != 23 {
		t.Fatalf("durable after FLUSHALL = %d, want 23", got)
	}
	u, err := b.svc.Usage(b.ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Meters) != 1 || u.Meters[0].Used != 23 || *u.Meters[0].Remaining != 0 || u.Meters[0].Overage != 0 {
		t.Fatalf("usage = %+v", u.Meters)
	}
}

func TestFlushRefusalsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	b.putSnapshot(t, tenant, 1, map[string]limiter.Quota{"requests": {Limit: 2, Mode: "hard"}})
	lim := newLimiter(t, b)
	admit(t, b, lim, tenant, 6) // 4 refused by the "requests" quota
	for i := 0; i < 2; i++ {
		if _, err := b.svc.FlushRefusals(b.ctx, b.rdb); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t, `SELECT coalesce(sum(refused), 0) FROM refusals_daily WHERE tenant_id = $1 AND policy = 'requests'`, tenant); n != 4 {
		t.Fatalf("refused = %d, want 4", n)
	}
	// Redis losing the hash never lowers the stored figure.
	b.rdb.Del(b.ctx, b.store.Keys().Refusals(tenant, time.Now()))
	if _, err := b.svc.FlushRefusals(b.ctx, b.rdb); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT coalesce(sum(refused), 0) FROM refusals_daily WHERE tenant_id = $1`, tenant); n != 4 {
		t.Fatalf("refused after loss = %d, want 4", n)
	}
}
