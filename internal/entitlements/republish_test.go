package entitlements_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// TestRepublish: a pass gives a live tenant's snapshot its full TTL back
// without announcing it (no limiter drops its cache), and writes back (and
// announces) a snapshot Redis lost.
func TestRepublish(t *testing.T) {
	b := setup(t)
	kept := b.mustTenant(t, b.free)
	lost := b.mustTenant(t, b.free)
	keys := b.store.Keys()
	testkit.Eventually(t, 5*time.Second, "snapshots published", func() bool {
		return b.rdb.Exists(b.ctx, keys.Snapshot(kept.ID), keys.Snapshot(lost.ID)).Val() == 2
	})
	before := b.rdb.Get(b.ctx, keys.Snapshot(kept.ID)).Val()
	b.rdb.Expire(b.ctx, keys.Snapshot(kept.ID), 5*time.Second) // about to expire
	b.rdb.Del(b.ctx, keys.Snapshot(lost.ID))

	sub := b.rdb.Subscribe(b.ctx, keys.Invalidations())
	defer sub.Close()
	if _, err := sub.Receive(b.ctx); err != nil {
		t.Fatal(err)
	}
	st, err := b.svc.Republish(b.ctx, "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tenants < 2 || st.Written < 1 || st.Last != "" {
		t.Fatalf("stats %+v", st)
	}
	if ttl := b.rdb.TTL(b.ctx, keys.Snapshot(kept.ID)).Val(); ttl < 6*24*time.Hour {
		t.Fatalf("kept tenant's snapshot TTL %v, want ~7 days", ttl)
	}
	if after := b.rdb.Get(b.ctx, keys.Snapshot(kept.ID)).Val(); after != before {
		t.Fatalf("unchanged snapshot rewritten:\n%s\n%s", before, after)
	}
	if !strings.Contains(b.rdb.Get(b.ctx, keys.Snapshot(lost.ID)).Val(), lost.ID) {
		t.Fatal("lost snapshot not written back")
	}
	// Announcements: the lost tenant's, never the kept one's. A sentinel
	// published after the pass marks the end of what it announced.
	b.rdb.Publish(b.ctx, keys.Invalidations(), "sentinel:0")
	got := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for !got["sentinel"] {
		select {
		case m := <-sub.Channel():
			got[strings.Split(m.Payload, ":")[0]] = true
		case <-deadline:
			t.Fatalf("announcements not received (got %v)", got)
		}
	}
	if !got[lost.ID] {
		t.Fatal("the written-back snapshot was not announced")
	}
	if got[kept.ID] {
		t.Fatal("an unchanged snapshot was announced")
	}
	// A pass starting after the last tenant id looks at nothing.
	if st, err := b.svc.Republish(b.ctx, "ffffffff-ffff-ffff-ffff-ffffffffffff", time.Minute); err != nil || st.Tenants != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}
