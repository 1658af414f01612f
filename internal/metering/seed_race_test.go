package metering

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// TestSeedRacingFlush interleaves the rebuild of a lost counter (the
// limiter's seed: read Postgres, then write Redis) with the worker's flush
// of a claim (claim in Redis, commit in Postgres, acknowledge in Redis) at
// each point where the old layout miscounted, and checks that Redis and
// Postgres end with exactly what was admitted (issue 10 point 5).
func TestSeedRacingFlush(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// race runs between the claim and the end of the test's flush
		// steps; it gets the steps to call in its own order.
		race func(t *testing.T, r *seedRace)
	}{
		{"Redis lost before the commit, rebuilt before it", func(t *testing.T, r *seedRace) {
			r.loseRedis(t)
			r.admit(t, 1) // rebuilt from Postgres without the claim
			r.commit(t)
			r.ack(t) // finds its claim lost: the counter is rebuilt again
		}},
		{"Redis lost after the commit, rebuilt before the ack", func(t *testing.T, r *seedRace) {
			r.commit(t)
			r.loseRedis(t)
			r.admit(t, 1) // rebuilt from Postgres with the claim
			r.ack(t)
		}},
		{"counter alone lost after the commit, claim still in Redis", func(t *testing.T, r *seedRace) {
			r.commit(t)
			r.loseCounter(t)
			r.admit(t, 1) // the old seed added the claim to a Postgres figure that had it
			r.ack(t)
		}},
		{"Postgres read before the commit, seed written after the ack", func(t *testing.T, r *seedRace) {
			r.loseRedis(t)
			read := make(chan struct{})
			resume := make(chan struct{})
			pause := func() { close(read); <-resume }
			r.afterRead.Store(&pause)
			done := make(chan struct{})
			go func() { defer close(done); r.admit(t, 1) }()
			<-read // the rebuild has the durable figure without the claim
			r.commit(t)
			r.ack(t)
			close(resume)
			<-done
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSeedRace(t)
			r.admit(t, 10)
			r.claim(t)
			tc.race(t, r)
			r.admit(t, 2)
			r.check(t)
		})
	}
}

type seedRace struct {
	b         *bundle
	lim       *limiter.Limiter
	k         limitstore.PendingKey
	c         limitstore.Claim
	admitted  atomic.Int64
	afterRead atomic.Pointer[func()]
}

func newSeedRace(t *testing.T) *seedRace {
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	snap := b.putSnapshot(t, tenant, 1, map[string]limiter.Quota{"requests": {Limit: 1000, Mode: "hard"}})
	r := &seedRace{b: b, k: limitstore.PendingKey{Tenant: tenant, Meter: "requests", PeriodStart: snap.PeriodStart}}
	lim, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, DisableRefusalCache: true,
		UsageLoader: func(ctx context.Context, tenant, meter string, start time.Time) (int64, error) {
			n, err := b.svc.LoadUsage(ctx, tenant, meter, start)
			if f := r.afterRead.Swap(nil); f != nil {
				(*f)()
			}
			return n, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	r.lim = lim
	return r
}

func (r *seedRace) admit(t *testing.T, n int) {
	for i := 0; i < n; i++ {
		d, err := r.lim.Allow(r.b.ctx, r.k.Tenant, limiter.Request{Cost: 1})
		if err != nil || !d.Allowed {
			t.Errorf("decision: %+v %v", d, err)
			return
		}
		r.admitted.Add(1)
	}
}

func (r *seedRace) claim(t *testing.T) {
	c, ok, err := r.b.store.ClaimPending(r.b.ctx, r.k)
	if err != nil || !ok || c.N != 10 {
		t.Fatalf("claim = %+v %v %v", c, ok, err)
	}
	r.c = c
}

// commit is the worker's commit of the claim it holds, as FlushOnce does it.
func (r *seedRace) commit(t *testing.T) {
	out, st, err := r.b.svc.commitClaims(r.b.ctx, []FlushClaim{{ID: r.c.ID, Tenant: r.k.Tenant, Meter: r.k.Meter, PeriodStart: r.k.PeriodStart, N: r.c.N}})
	if err != nil || out[0] != commitCommitted || st.Units != r.c.N {
		t.Fatalf("commit: %v %+v %v", out, st, err)
	}
}

func (r *seedRace) ack(t *testing.T) {
	if err := r.b.store.AckPending(r.b.ctx, r.k, r.c.ID); err != nil {
		t.Fatal(err)
	}
}

// loseRedis drops the tenant's state hash, as a restart without
// persistence or an eviction does.
func (r *seedRace) loseRedis(t *testing.T) {
	if err := r.b.rdb.Del(r.b.ctx, r.b.store.Keys().State(r.k.Tenant)).Err(); err != nil {
		t.Fatal(err)
	}
}

// loseCounter drops the counter's field alone, leaving the claim.
func (r *seedRace) loseCounter(t *testing.T) {
	c := keyspace.CounterOf(r.k.Meter, r.k.PeriodStart)
	if err := r.b.rdb.HDel(r.b.ctx, r.b.store.Keys().State(r.k.Tenant), c.Used()).Err(); err != nil {
		t.Fatal(err)
	}
}

// check flushes what is left and compares both stores with what was
// admitted.
func (r *seedRace) check(t *testing.T) {
	t.Helper()
	if _, err := r.b.svc.FlushOnce(r.b.ctx); err != nil {
		t.Fatal(err)
	}
	want := r.admitted.Load()
	if got := r.b.durable(t, r.k.Tenant, r.k.Meter, r.k.PeriodStart); got != want {
		t.Errorf("Postgres has %d, admitted %d", got, want)
	}
	used, ok, err := r.b.store.Used(r.b.ctx, r.k.Tenant, r.k.Meter, r.k.PeriodStart)
	if err != nil || !ok || used != want {
		t.Errorf("Redis counter %d (%v %v), admitted %d", used, ok, err, want)
	}
	if n, err := r.b.store.Unflushed(r.b.ctx, r.k.Tenant, r.k.Meter, r.k.PeriodStart); err != nil || n != 0 {
		t.Errorf("unflushed after the flush: %d %v", n, err)
	}
}
