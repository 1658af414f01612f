package limiter

import (
	"fmt"
	"testing"
	"time"
)

// The alias cache: an invalidation drops the aliases of its tenant only, a
// read begun before any invalidation is not cached after it, entries
// expire with the TTL, and the cache stays within its bound.
func TestAliasCache(t *testing.T) {
	c := newAliasCache(3)
	now := time.Now()
	c.put("a1", "A", now, c.epochNow())
	c.put("a2", "A", now, c.epochNow())
	c.put("b1", "B", now, c.epochNow())
	c.invalidate("A")
	if _, ok := c.get("a1", now, time.Minute); ok {
		t.Fatal("a1 survived A's invalidation")
	}
	if _, ok := c.get("a2", now, time.Minute); ok {
		t.Fatal("a2 survived A's invalidation")
	}
	if id, ok := c.get("b1", now, time.Minute); !ok || id != "B" {
		t.Fatalf("b1 = %q %v after A's invalidation", id, ok)
	}
	if _, ok := c.get("b1", now.Add(time.Minute), time.Minute); ok {
		t.Fatal("b1 outlived the TTL")
	}

	// A read begun before an invalidation (of any tenant) is not cached.
	epoch := c.epochNow()
	c.invalidate("C")
	c.put("c1", "C", now, epoch)
	if _, ok := c.get("c1", now, time.Minute); ok {
		t.Fatal("a read older than an invalidation was cached")
	}

	// Moving an external id to another tenant leaves no trace under the old one.
	c.put("m", "A", now, c.epochNow())
	c.put("m", "B", now, c.epochNow())
	c.invalidate("A")
	if id, ok := c.get("m", now, time.Minute); !ok || id != "B" {
		t.Fatalf("m = %q %v: A's invalidation took B's alias", id, ok)
	}

	for i := range 20 {
		c.put(fmt.Sprint("x", i), fmt.Sprint("T", i%4), now, c.epochNow())
	}
	n := 0
	for range c.byExt {
		n++
	}
	m := 0
	for _, set := range c.byTenant {
		m += len(set)
	}
	if n > 3 || m != n {
		t.Fatalf("%d entries (%d in the reverse index), bound 3", n, m)
	}
	c.invalidate("")
	if len(c.byExt) != 0 || len(c.byTenant) != 0 {
		t.Fatal("invalidate(\"\") kept entries")
	}
}
