package credits_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// withRedis is setup with grants written to the test's Redis, as the api
// and the worker write them.
func withRedis(t *testing.T) bundle {
	b := setup(t)
	b.svc = credits.NewService(b.db, b.ents, b.cat, nil, credits.Options{Now: b.clock.Now, Grants: limitstore.New(b.rdb, b.prefix)})
	return b
}

// redisGrants reads the tenant's grants of requests as Redis holds them.
func (b bundle) redisGrants(t *testing.T, tenant string) []keyspace.Grant {
	t.Helper()
	gs, err := keyspace.Keys{Prefix: b.prefix}.Grants(context.Background(), b.rdb, tenant, "requests")
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

func left(gs []keyspace.Grant, id string) int64 {
	for _, g := range gs {
		if g.ID == id {
			return g.Remaining
		}
	}
	return -1
}

// A grant created or voided through the service reaches the limiter's
// Redis at once, listed in draw order (priority, earliest expiry with
// never-expiring last, creation; pending ones too) with the ledger's
// remaining; a decision draws it after the included quota, and stops
// drawing a voided one.
func TestGrantsAreWrittenToRedisInDrawOrder(t *testing.T) {
	b := withRedis(t)
	ctx := context.Background()
	tn := b.tenant(t)
	never := b.grant(t, tn, 100, 50, nil)
	soon := b.grant(t, tn, 200, 50, ptr(b.clock.Now().Add(time.Hour)))
	first := b.grant(t, tn, 300, 10, nil)
	later, err := b.svc.Create(ctx, tn, credits.GrantInput{Meter: "requests", Amount: ptr(int64(400)), EffectiveAt: ptr(b.clock.Now().Add(time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.svc.RedisGrants(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, g := range want {
		order = append(order, g.ID)
	}
	if len(order) != 4 || order[0] != first.ID || order[1] != soon.ID || order[2] != never.ID || order[3] != later.ID {
		t.Fatalf("draw order %v, want first, soon, never, later", order)
	}
	got := b.redisGrants(t, tn)
	if len(got) != 4 {
		t.Fatalf("Redis holds %+v", got)
	}
	for i, g := range got {
		if g.ID != want[i].ID || g.Remaining != want[i].Remaining || !g.EffectiveAt.Equal(want[i].EffectiveAt.Truncate(time.Millisecond)) {
			t.Fatalf("Redis grant %d %+v, want %+v", i, g, want[i])
		}
	}

	// The limiter draws them: included 1,000, then first (300), then soon.
	snap, err := b.ents.SnapshotFromPostgres(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	if err := limitstore.New(b.rdb, b.prefix).PutSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, GrantLoader: b.svc.RedisGrants})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d, err := l.Allow(ctx, tn, limiter.Request{Cost: 1350})
	if err != nil || !d.Allowed {
		t.Fatalf("1,350 of 1,000 included + 600 active: %+v, %v", d, err)
	}
	if gs := b.redisGrants(t, tn); left(gs, first.ID) != 0 || left(gs, soon.ID) != 150 {
		t.Fatalf("after 1,350: %+v; want first 0, soon 150", gs)
	}

	// Void soon: the limiter stops drawing it within a second; its
	// unflushed draw keeps it listed, closed, for the flush.
	if _, err := b.svc.Void(ctx, soon.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err = l.Allow(ctx, tn, limiter.Request{Cost: 101, Peek: true}) // never holds 100
		if err == nil && !d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still admitted after the void: %+v, %v", d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	kept := false
	for _, g := range b.redisGrants(t, tn) {
		kept = kept || (g.ID == soon.ID && g.Closed && g.Remaining == 150)
	}
	if !kept {
		t.Fatalf("grants after the void %+v, want soon kept closed for its flush", b.redisGrants(t, tn))
	}
}

// A grant made in another package's transaction (a top-up, a rollover)
// reaches Redis by the worker's sweep, PublishChanged.
func TestGrantsMadeInATransactionReachRedisBySweep(t *testing.T) {
	b := withRedis(t)
	ctx := context.Background()
	tn := b.tenant(t)
	since := b.clock.Now().Add(-time.Second)
	g, _, err := b.svc.CreateTx(ctx, b.db, credits.NewGrant{TenantID: tn, Meter: "requests", Amount: 10, Priority: 50, Source: credits.SourceTopup, SourceRef: "cs_1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.redisGrants(t, tn); got != nil {
		t.Fatalf("in Redis before the sweep: %+v", got)
	}
	n, err := b.svc.PublishChanged(ctx, since)
	if err != nil || n < 1 { // other tests' tenants may be in the window too
		t.Fatalf("PublishChanged = %d, %v", n, err)
	}
	if got := b.redisGrants(t, tn); left(got, g.ID) != 10 {
		t.Fatalf("after the sweep %+v, want %s with 10", got, g.ID)
	}
	// The first sweep of a worker (zero since) writes every open grant.
	if n, err := b.svc.PublishChanged(ctx, time.Time{}); err != nil || n < 1 {
		t.Fatalf("full sweep = %d, %v", n, err)
	}
}
