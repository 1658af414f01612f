package limitstore_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// These tests hold the server's side of the protocol (claims, flush
// acknowledgements, marks) against the limiter's counting, on a single
// Redis and on a 3-node Cluster; they lived in the limiter's tests, which
// may no longer import this package.

type backend struct {
	rdb    redis.UniversalClient
	prefix string
}

func single(t *testing.T) backend {
	rdb, prefix := redistest.New(t)
	return backend{rdb: rdb, prefix: prefix}
}

var (
	clusterOnce sync.Once
	cluster     *redistest.Cluster
	clusterErr  error
)

// eachBackend runs f against the single Redis and a 3-node Cluster (started
// once for the package, removed by TestMain).
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Run("redis", func(t *testing.T) { f(t, single(t)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("cluster tests skipped in -short mode")
		}
		clusterOnce.Do(func() { cluster, clusterErr = redistest.StartCluster() })
		if clusterErr != nil {
			if errors.Is(clusterErr, redistest.ErrNoRedisServer) {
				testkit.Unavailable(t, "redis-server (for a cluster)", clusterErr)
			}
			t.Fatal(clusterErr)
		}
		prefix := redistest.Prefix()
		c := cluster.Client(&redis.ClusterOptions{ContextTimeoutEnabled: true})
		t.Cleanup(func() {
			redistest.Clean(context.Background(), c, prefix)
			c.Close()
		})
		f(t, backend{rdb: c, prefix: prefix})
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Close()
	}
	os.Exit(code)
}

func put(t testing.TB, st *limitstore.Store, s limiter.Snapshot) {
	t.Helper()
	if err := st.PutSnapshot(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestPendingFlushProtocol(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		st := limitstore.New(b.rdb, b.prefix)
		var snaps []limiter.Snapshot
		for _, tn := range []string{"f1", "f2", "f3"} {
			s := limitertest.Snapshot(tn, func(s *limiter.Snapshot) { s.Quotas = map[string]limiter.Quota{"requests": {Limit: 100}} })
			snaps = append(snaps, s)
			put(t, st, s)
		}
		l := limitertest.New(t, b.rdb, limiter.Options{Prefix: b.prefix})
		for i, s := range snaps {
			for j := 0; j <= i; j++ {
				if _, err := l.Allow(ctx, s.TenantID, limiter.Request{Cost: 2}); err != nil {
					t.Fatal(err)
				}
			}
		}
		got := map[string]int64{}
		var first limitstore.Claim
		// The limiter marked each counter dirty: the store finds them without a scan.
		err := st.DirtyPending(ctx, func(k limitstore.PendingKey) error {
			c, ok, err := st.ClaimPending(ctx, k)
			if err != nil || !ok {
				return err
			}
			if k.Tenant == "f1" {
				first = c // "crash" before acknowledging f1's claim
				return nil
			}
			got[k.Tenant] += c.N
			return st.AckPending(ctx, k, c.ID)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got["f2"] != 4 || got["f3"] != 6 || first.N != 2 {
			t.Fatalf("claims %v, f1 %+v", got, first)
		}
		// The retried flush gets the same claim back, even with new usage meanwhile.
		l.Allow(ctx, "f1", limiter.Request{Cost: 1}) //nolint:errcheck
		k := limitstore.PendingKey{Tenant: "f1", Meter: "requests", PeriodStart: snaps[0].PeriodStart}
		c, ok, err := st.ClaimPending(ctx, k)
		if err != nil || !ok || c.ID != first.ID || c.N != first.N || c.Seq != first.Seq || len(c.Grants) != len(first.Grants) {
			t.Fatalf("retried claim %+v %v %v, want %+v", c, ok, err, first)
		}
		if err := st.AckPending(ctx, k, c.ID); err != nil {
			t.Fatal(err)
		}
		c, ok, err = st.ClaimPending(ctx, k)
		if err != nil || !ok || c.N != 1 || c.ID == first.ID {
			t.Fatalf("next claim %+v %v %v", c, ok, err)
		}
		if err := st.AckPending(ctx, k, c.ID); err != nil {
			t.Fatal(err)
		}
		// Fully flushed counters lose their mark: the next pass finds nothing.
		var left []limitstore.PendingKey
		if err := st.DirtyPending(ctx, func(k limitstore.PendingKey) error { left = append(left, k); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Fatalf("still marked after the flush: %+v", left)
		}
		// AddUsage only touches an existing counter.
		if err := st.AddUsage(ctx, "f1", "requests", snaps[0].PeriodStart, 10); err != nil {
			t.Fatal(err)
		}
		if err := st.AddUsage(ctx, "f1", "exports", snaps[0].PeriodStart, 10); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := st.Used(ctx, "f1", "requests", snaps[0].PeriodStart); n != 13 {
			t.Fatalf("used %d", n)
		}
		if _, ok, _ := st.Used(ctx, "f1", "exports", snaps[0].PeriodStart); ok {
			t.Fatal("AddUsage created a counter")
		}
	})
}

// TestReserveSettleCancel: a reservation is decided like any request and
// counts its estimate; settling charges the actual cost instead (refund or
// charge, a charge beyond the limit recorded, never refused); cancelling
// gives the estimate back; a settled, cancelled or other tenant's
// reservation is not found; the durable (pending) figure follows.
func TestReserveSettleCancel(t *testing.T) {
	b := single(t)
	ctx := context.Background()
	rdb := b.rdb
	st := limitstore.New(rdb, b.prefix)
	s := limitertest.Snapshot("llm", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"tokens": {Limit: 100, Mode: limiter.ModeHard}}
	})
	put(t, st, s)
	put(t, st, limitertest.Snapshot("other", nil))
	l := limitertest.New(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second})
	used := func() int64 {
		n, _, err := st.Used(ctx, "llm", "tokens", s.PeriodStart)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	pending := func() int64 {
		n, err := st.Unflushed(ctx, "llm", "tokens", s.PeriodStart)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	reserve := func(est int64) *limiter.Decision {
		t.Helper()
		d, err := l.Allow(ctx, "llm", limiter.Request{Cost: est, Meter: "tokens", Reserve: true})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	d := reserve(10)
	if !d.Allowed || d.Reservation == nil || d.Reservation.Estimate != 10 || len(d.Reservation.ID) != 24 || !d.Reservation.ExpiresAt.After(time.Now()) {
		t.Fatalf("reserve: %+v %+v", d, d.Reservation)
	}
	if used() != 10 {
		t.Fatalf("used %d after reserving 10", used())
	}
	// The durable side flushes the estimate meanwhile.
	k := limitstore.PendingKey{Tenant: "llm", Meter: "tokens", PeriodStart: s.PeriodStart}
	c, ok, err := st.ClaimPending(ctx, k)
	if err != nil || !ok || c.N != 10 {
		t.Fatalf("claim %+v %v %v", c, ok, err)
	}
	if err := st.AckPending(ctx, k, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, "other", d.Reservation.ID, 1); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("another tenant's reservation: %v", err)
	}
	if est, err := l.Settle(ctx, "llm", d.Reservation.ID, 4); err != nil || est != 10 {
		t.Fatalf("settle: %d %v", est, err)
	}
	if used() != 4 || pending() != -6 {
		t.Fatalf("after settling 4 of 10: used %d, pending %d (want 4, -6)", used(), pending())
	}
	// The refund reaches the durable figure through a (negative) flush.
	if c, ok, err := st.ClaimPending(ctx, k); err != nil || !ok || c.N != -6 {
		t.Fatalf("claim of the refund %+v %v %v", c, ok, err)
	} else if err := st.AckPending(ctx, k, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, "llm", d.Reservation.ID, 4); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("settled twice: %v", err)
	}
	if _, err := l.Cancel(ctx, "llm", "not-an-id"); !errors.Is(err, limiter.ErrReservationNotFound) {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := l.Settle(ctx, "llm", d.Reservation.ID, -1); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("negative actual: %v", err)
	}

	// Cancel gives the estimate back.
	d = reserve(30)
	if used() != 34 {
		t.Fatalf("used %d", used())
	}
	if est, err := l.Cancel(ctx, "llm", d.Reservation.ID); err != nil || est != 30 || used() != 4 {
		t.Fatalf("cancel: %d %v, used %d", est, err, used())
	}

	// A charge beyond the limit is recorded, never refused; what follows is refused.
	d = reserve(90)
	if !d.Allowed {
		t.Fatalf("90 of 96 left refused: %+v", d)
	}
	if _, err := l.Settle(ctx, "llm", d.Reservation.ID, 150); err != nil {
		t.Fatalf("settle beyond the limit: %v", err)
	}
	if used() != 154 {
		t.Fatalf("used %d, want 154", used())
	}
	if d := reserve(1); d.Allowed || d.Reservation != nil {
		t.Fatalf("admitted over the limit: %+v", d)
	}
	// A refused reservation holds nothing; a peek reserves nothing.
	if d, err := l.Allow(ctx, "llm", limiter.Request{Meter: "tokens", Reserve: true, Peek: true}); err != nil || d.Reservation != nil {
		t.Fatalf("peek with Reserve: %+v %v", d, err)
	}
}
