package limitstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// TestProtocolRoundTrip: the limiter and the store both name their keys
// with package keyspace; what one writes the other must also mean the same
// way (claims, dirty marks, counter rebuilds, refusal counts), so every key
// kind the two share is exercised through both sides.
func TestProtocolRoundTrip(t *testing.T) {
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	st := limitstore.New(rdb, prefix)
	start := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	snap := limiter.Snapshot{
		TenantID: "acme", Plan: "pro", Version: 1,
		Quotas:      map[string]limiter.Quota{"requests": {Limit: 3, Mode: limiter.ModeHard}},
		PeriodStart: start, PeriodEnd: start.Add(30 * 24 * time.Hour),
	}
	if err := st.PutSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	var durable atomic.Int64 // what the flush committed to "Postgres"
	l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Timeout: 2 * time.Second,
		UsageLoader: func(context.Context, string, string, time.Time) (int64, error) { return durable.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// Snapshot key: the limiter finds what the store wrote (no loader).
	for i := 0; i < 2; i++ {
		if d, err := l.Allow(ctx, "acme", limiter.Request{}); err != nil || !d.Allowed || d.Plan != "pro" {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
	}
	// Quota key: the store reads what the limiter counted.
	if n, ok, err := st.Used(ctx, "acme", "requests", start); err != nil || !ok || n != 2 {
		t.Fatalf("Used = %d %v %v, want 2", n, ok, err)
	}
	// State hash: the store finds and claims what the limiter counted.
	var found []limitstore.PendingKey
	if err := st.ScanPending(ctx, func(k limitstore.PendingKey) error { found = append(found, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Tenant != "acme" || found[0].Meter != "requests" || !found[0].PeriodStart.Equal(start) {
		t.Fatalf("ScanPending found %+v", found)
	}
	c, ok, err := st.ClaimPending(ctx, found[0])
	if err != nil || !ok || c.N != 2 {
		t.Fatalf("claim %+v %v %v", c, ok, err)
	}
	// Dirty mark: the limiter marked the counter where the store looks.
	var marked []limitstore.PendingKey
	if err := st.DirtyPending(ctx, func(k limitstore.PendingKey) error { marked = append(marked, k); return nil }); err != nil || len(marked) != 1 || marked[0] != found[0] {
		t.Fatalf("DirtyPending found %+v %v", marked, err)
	}
	// Counter fields: the counter alone is lost while the claim is being
	// committed. The limiter rebuilds it from durable usage (0: the commit
	// has not happened) and drops the claim, whose acknowledgement after the
	// commit then has the counter rebuilt again, from 2: 3 used of 3.
	c0 := keyspace.CounterOf("requests", start)
	if err := rdb.HDel(ctx, st.Keys().State("acme"), c0.Used()).Err(); err != nil {
		t.Fatal(err)
	}
	if d, err := l.Allow(ctx, "acme", limiter.Request{}); err != nil || !d.Allowed || d.Policies[0].Remaining != 2 {
		t.Fatalf("after the rebuild: %+v %v", d, err)
	}
	durable.Store(2)
	if err := st.AckPending(ctx, found[0], c.ID); err != nil {
		t.Fatal(err)
	}
	// Refusal key: the store counts what the limiter refused.
	if d, err := l.Allow(ctx, "acme", limiter.Request{}); err != nil || d.Allowed || d.Policies[0].Remaining != 0 {
		t.Fatalf("after the second rebuild, over quota: %+v %v", d, err)
	}
	if m, err := st.Refusals(ctx, "acme", time.Now()); err != nil || m["requests"] != 1 {
		t.Fatalf("refusals %v %v", m, err)
	}
	// AddUsage on the quota key is what the limiter enforces.
	snap.Version, snap.Quotas = 2, map[string]limiter.Quota{"requests": {Limit: 10}}
	if err := st.PutSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if err := st.AddUsage(ctx, "acme", "requests", start, 6); err != nil {
		t.Fatal(err)
	}
	// Invalidation channel: the limiter follows the new version (limit 10;
	// 3 + 6 used) without waiting for its cache TTL.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := l.Allow(ctx, "acme", limiter.Request{Peek: true})
		if err == nil && d.Allowed && d.Policies[0].Limit == 10 {
			if d.Policies[0].Remaining != 1 {
				t.Fatalf("remaining %d, want 10-9", d.Policies[0].Remaining)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the limiter never saw version 2: %+v %v", d, err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}
