package keyspace_test

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// TestLayout pins the key names: they are a protocol between processes of
// different releases (the server and backends' limiters), so a change here
// is a breaking change of both, never a refactoring.
func TestLayout(t *testing.T) {
	start := time.Unix(1764547200, 0)
	k := keyspace.Keys{Prefix: "p"}
	for got, want := range map[string]string{
		keyspace.Keys{}.Snapshot("a"): "tg:{t:a}:ent",
		k.Limits("a"):                 "p:{t:a}:lim",
		k.State("a"):                  "p:{t:a}:st",
		keyspace.CounterOf("requests", start).Used():                 "q:requests:1764547200",
		keyspace.CounterOf("requests", start).Flushed():              "f:requests:1764547200",
		keyspace.CounterOf("requests", start).Missed():               "g:requests:1764547200",
		k.Mark("a", "requests", start):                               "p:{t:a}:qp:requests:1764547200",
		k.Concurrency("a"):                                           "p:{t:a}:conc",
		k.Window("a", "w", 2*time.Second):                            "p:{t:a}:sw:w:2000",
		k.FixedWindow("a", "w", 2*time.Second):                       "p:{t:a}:fw:w:2000",
		k.PlanWindow("a", "hourly", time.Hour, false):                "p:{t:a}:pw:hourly:3600000",
		k.PlanWindow("a", "hourly", time.Hour, true):                 "p:{t:a}:pf:hourly:3600000",
		k.ExplicitRate("a"):                                          "p:{t:a}:xr",
		k.ExplicitConcurrency("a"):                                   "p:{t:a}:xconc",
		k.Reservation("a", "r1"):                                     "p:{t:a}:rsv:r1",
		k.PrefetchReturn("a", "l1"):                                  "p:{t:a}:lr:l1",
		k.Refusals("a", start):                                       "p:{t:a}:rf:20251201",
		k.Instances():                                                "p:instances",
		k.Invalidations():                                            "p:ent:inval",
		k.DirtyPending("a"):                                          "p:dirty:q",
		keyspace.Keys{Prefix: "p", Cluster: true}.DirtyRefusals("a"): "p:{" + keyspace.SlotTag(keyspace.Slot("t:a")) + "}:dirty:rf",
		keyspace.Invalidation("a:b", 7):                              "a:b:7",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// TestSlotTags: every slot has a tag, and each tag lands in its slot (the
// CRC16 of Redis Cluster: "123456789" is 0x31C3, slot 12739).
func TestSlotTags(t *testing.T) {
	if s := keyspace.Slot("123456789"); s != 0x31C3%16384 {
		t.Fatalf("Slot = %d", s)
	}
	for n := 0; n < 16384; n++ {
		if s := keyspace.Slot(keyspace.SlotTag(n)); s != n {
			t.Fatalf("SlotTag(%d) = %q lands in %d", n, keyspace.SlotTag(n), s)
		}
	}
	if len(keyspace.Keys{Cluster: true}.AllDirty("q")) != 16384 || len(keyspace.Keys{}.AllDirty("q")) != 1 {
		t.Fatal("AllDirty: one per slot on a Cluster, one otherwise")
	}
}

func TestParseInvalidation(t *testing.T) {
	for msg, want := range map[string]struct {
		tenant  string
		version int64
	}{"a:3": {"a", 3}, "a:b:-1": {"a:b", -1}, "a": {"a", -1}, "a:x": {"a", -1}} {
		if tn, v := keyspace.ParseInvalidation(msg); tn != want.tenant || v != want.version {
			t.Errorf("%q: %q %d", msg, tn, v)
		}
	}
}
