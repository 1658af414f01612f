package limitstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// A claim is pending while ci differs from ca: the acknowledgement writes
// ca alone and leaves ci and cn for the next claim to overwrite. Hashes
// written by the earlier layout (an acknowledgement deleted ci and cn, so
// ci present meant a pending claim) are read the same way.
func TestClaimPendingWhileIDDiffersFromAcknowledged(t *testing.T) {
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	st := limitstore.New(rdb, prefix)
	start := time.Unix(1764547200, 0).UTC()
	k := limitstore.PendingKey{Tenant: "acme", Meter: "requests", PeriodStart: start}
	c := keyspace.CounterOf(k.Meter, start)
	h, d, mark := st.Keys().State(k.Tenant), st.Keys().DirtyPending(k.Tenant), st.Keys().Mark(k.Tenant, k.Meter, start)
	set := func(q, f int64) { // decisions counted q, the flush moved f
		t.Helper()
		if err := rdb.HSet(ctx, h, c.Used(), q, c.Flushed(), f).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.SAdd(ctx, d, mark).Err(); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(wantN int64) string {
		t.Helper()
		cl, ok, err := st.ClaimPending(ctx, k)
		if err != nil || !ok || cl.N != wantN {
			t.Fatalf("claim = %+v %v %v, want %d units", cl, ok, err, wantN)
		}
		return cl.ID
	}
	ack := func(id string) {
		t.Helper()
		if err := st.AckPending(ctx, k, id); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() int { // counters ScanPending finds (once per field that says so)
		t.Helper()
		seen := map[limitstore.PendingKey]bool{}
		if err := st.ScanPending(ctx, func(k limitstore.PendingKey) error { seen[k] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return len(seen)
	}
	field := func(f string) string { return rdb.HGet(ctx, h, f).Val() }

	set(5, 0)
	x := claim(5)
	if again := claim(5); again != x {
		t.Fatalf("an unacknowledged claim was claimed again as %s, want %s", again, x)
	}
	ack(x)
	if field("ci:"+c.Suffix) != x || field("ca:"+c.Suffix) != x || field(c.Flushed()) != "5" {
		t.Fatalf("after the acknowledgement: %v", rdb.HGetAll(ctx, h).Val())
	}
	if n := rdb.SCard(ctx, d).Val(); n != 0 || pending() != 0 {
		t.Fatalf("an acknowledged counter left %d marks, ScanPending %d", n, pending())
	}
	if cl, ok, err := st.ClaimPending(ctx, k); err != nil || ok {
		t.Fatalf("nothing to flush, claimed %+v %v", cl, err)
	}

	// Growth after the acknowledgement is a new claim; a late replay of
	// the acknowledgement of x (another worker's) changes nothing.
	set(8, 5)
	y := claim(3)
	if y == x {
		t.Fatal("the new claim reused the acknowledged id")
	}
	ack(x)
	if e := field("e"); e != "" {
		t.Fatalf("a replayed acknowledgement moved the epoch to %s", e)
	}
	if pending() != 1 || claim(3) != y {
		t.Fatal("the pending claim did not survive a replayed acknowledgement")
	}
	ack(y)
	ack(y)
	if field("e") != "" || field("ca:"+c.Suffix) != y || pending() != 0 {
		t.Fatalf("after the acknowledgement of y, twice: %v", rdb.HGetAll(ctx, h).Val())
	}

	// The earlier layout: a pending claim (ci, cn; ca older) is returned as
	// it is and acknowledged; an acknowledged one (ci gone, ca kept) is not.
	if err := rdb.HSet(ctx, h, c.Used(), 10, c.Flushed(), 10, "ci:"+c.Suffix, "old", "cn:"+c.Suffix, 2, "ca:"+c.Suffix, y).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.SAdd(ctx, d, mark)
	if pending() != 1 || claim(2) != "old" {
		t.Fatal("a pending claim of the earlier layout was not returned")
	}
	ack("old")
	if pending() != 0 || rdb.SCard(ctx, d).Val() != 0 || field("e") != "" {
		t.Fatalf("after acknowledging the earlier layout's claim: %v", rdb.HGetAll(ctx, h).Val())
	}
	if err := rdb.HDel(ctx, h, "ci:"+c.Suffix, "cn:"+c.Suffix).Err(); err != nil { // acknowledged by the earlier version
		t.Fatal(err)
	}
	set(12, 10)
	w := claim(2)
	if w == "old" || w == y {
		t.Fatalf("claim after the earlier layout's acknowledgement returned %s", w)
	}

	// Redis lost the hash while a claim was being committed: its
	// acknowledgement moves the epoch (a rebuild reads Postgres again).
	if err := rdb.Del(ctx, h).Err(); err != nil {
		t.Fatal(err)
	}
	ack(w)
	if field("e") != "1" {
		t.Fatalf("a lost claim's acknowledgement left the epoch at %q", field("e"))
	}
}
