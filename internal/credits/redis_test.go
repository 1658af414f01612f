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
	b.svc = credits.NewService(b.db, b.ents, nil, credits.Options{Now: b.clock.Now, Grants: limitstore.New(b.rdb, b.prefix)})
	return b
}

func (b bundle) redisList(t *testing.T, tenant string) string {
	t.Helper()
	return b.rdb.HGet(context.Background(), keyspace.Keys{Prefix: b.prefix}.State(tenant), keyspace.GrantsField).Val()
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
	list, _ := keyspace.GrantList(want)
	if got := b.redisList(t, tn); got != list {
		t.Fatalf("Redis lists %q, want %q", got, list)
	}
	st := keyspace.Keys{Prefix: b.prefix}.State(tn)
	if n, _ := b.rdb.HGet(ctx, st, keyspace.GrantRemaining(soon.ID)).Int64(); n != 200 {
		t.Fatalf("remaining in Redis %d, want 200", n)
	}

	// The limiter draws them: included 1,000, then first (300), then soon.
	snap, err := b.ents.Snapshot(ctx, tn)
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
	if n, _ := b.rdb.HGet(ctx, st, keyspace.GrantRemaining(first.ID)).Int64(); n != 0 {
		t.Fatalf("first left %d, want 0", n)
	}
	if n, _ := b.rdb.HGet(ctx, st, keyspace.GrantRemaining(soon.ID)).Int64(); n != 150 {
		t.Fatalf("soon left %d, want 150", n)
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
	if got := b.redisList(t, tn); got == "" || !contains(got, soon.ID+" requests 0 1 ") {
		t.Fatalf("list after the void %q, want soon kept closed", got)
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
	if got := b.redisList(t, tn); got != "" {
		t.Fatalf("listed before the sweep: %q", got)
	}
	n, err := b.svc.PublishChanged(ctx, since)
	if err != nil || n < 1 { // other tests' tenants may be in the window too
		t.Fatalf("PublishChanged = %d, %v", n, err)
	}
	if got := b.redisList(t, tn); !contains(got, g.ID+" requests ") {
		t.Fatalf("after the sweep %q, want %s listed", got, g.ID)
	}
	// The first sweep of a worker (zero since) writes every open grant.
	if n, err := b.svc.PublishChanged(ctx, time.Time{}); err != nil || n < 1 {
		t.Fatalf("full sweep = %d, %v", n, err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
