package limiter_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// ledger is the durable side of grants as the limiter's GrantLoader sees
// it (Tollgate's credits ledger in Postgres): per tenant, the grants in
// draw order with what no flush has recorded as drawn.
type ledger struct {
	mu     sync.Mutex
	grants map[string][]keyspace.Grant
	calls  atomic.Int64
}

func (l *ledger) set(tenant string, gs ...keyspace.Grant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.grants == nil {
		l.grants = map[string][]keyspace.Grant{}
	}
	l.grants[tenant] = gs
}

func (l *ledger) load(_ context.Context, tenant string) ([]keyspace.Grant, error) {
	l.calls.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]keyspace.Grant(nil), l.grants[tenant]...), nil
}

// putGrants writes the tenant's grants as the server does when one is
// created, voided or expires.
func putGrants(t testing.TB, st *store, tenant string, gs ...keyspace.Grant) {
	t.Helper()
	err := st.keys.PutGrants(context.Background(), st.rdb, tenant, func(context.Context) ([]keyspace.Grant, error) { return gs, nil })
	if err != nil {
		t.Fatal(err)
	}
}

// grantLeft reads a grant's remaining in Redis (-1 when missing).
func grantLeft(t testing.TB, st *store, tenant, id string) int64 {
	t.Helper()
	gs, err := st.keys.Grants(context.Background(), st.rdb, tenant, "requests")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.ID == id {
			return g.Remaining
		}
	}
	return -1
}

func hardQuota(limit int64, mode limiter.QuotaMode) func(*limiter.Snapshot) {
	return func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: limit, Mode: mode}}
	}
}

func grant(id string, remaining int64) keyspace.Grant {
	return keyspace.Grant{ID: id, Meter: "requests", EffectiveAt: time.Now().Add(-time.Hour), Remaining: remaining}
}

// TestGrantsExactAcrossInstances is issue 26's exactness target: 4
// limiters × 50 clients against an included 5,000 and grants of 3,000 and
// 2,000 admit exactly 10,000, the grants drawn to zero in order, on one
// Redis and on a Cluster, in the fast decision of a quota alone, in the
// common plan's (a rate and a quota: fastGrantsBody), in the general one (a
// concurrency slot sends every decision there), batched, and with
// Prefetch on (a tenant with grants is decided exactly there).
func TestGrantsExactAcrossInstances(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, name := range []string{"fast", "common", "general", "batching", "prefetch"} {
			general := name == "general"
			t.Run(name, func(t *testing.T) {
				tenant := "exact-" + name
				ls, st := fleet(t, b, limiter.Options{Timeout: 2 * time.Second, Batching: name == "batching", Prefetch: name == "prefetch"})
				s := snapshot(tenant, hardQuota(5000, limiter.ModeHard))
				if general {
					s.Concurrency = 1000
				}
				if name == "common" {
					// a rate beside the quota: the common plan's script
					// (fastGrantsBody, grant_scan) decides
					s.Rate = &limiter.Rate{PerSecond: 1e6, Burst: 1e6}
				}
				put(t, st, s)
				putGrants(t, st, tenant, grant("g3000", 3000), grant("g2000", 2000))
				var admitted, refused atomic.Int64
				var wg sync.WaitGroup
				ctx := context.Background()
				for c := 0; c < 50; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							l := ls[(c+i)%len(ls)]
							d, err := l.Allow(ctx, tenant, limiter.Request{Cost: 1, Concurrency: general})
							if err != nil {
								t.Error(err)
								return
							}
							if !d.Allowed {
								if d.Policy != "requests" {
									t.Errorf("refused by %q", d.Policy)
								}
								if refused.Add(1) >= 200 {
									return
								}
								continue
							}
							admitted.Add(1)
							_ = d.Release(ctx)
						}
					}()
				}
				wg.Wait()
				if got := admitted.Load(); got != 10000 {
					t.Fatalf("admitted %d, want exactly 10,000 (5,000 included + 3,000 + 2,000)", got)
				}
				if a, b := grantLeft(t, st, tenant, "g3000"), grantLeft(t, st, tenant, "g2000"); a != 0 || b != 0 {
					t.Fatalf("grants left %d and %d, want both drawn to 0", a, b)
				}
				used, _, err := st.Used(ctx, tenant, "requests", s.PeriodStart)
				if err != nil || used != 10000 {
					t.Fatalf("counter %d (%v), want every unit consumed counted: 10,000", used, err)
				}
			})
		}
	})
}

// Included first, then the grants in the list's order (the server lists
// them by priority, earliest expiry, creation); the quota's remaining (the
// RateLimit header's r) counts the grants; a hard quota refuses only once
// all of them are used, a soft one goes on to overage after them.
func TestGrantsDrawOrderAndModes(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	put(t, st, snapshot("order", hardQuota(10, limiter.ModeHard)))
	putGrants(t, st, "order", grant("first", 5), grant("second", 7))

	d := limitertest.Allowed(t, l, "order", limiter.Request{Cost: 8})
	if r := limitertest.Remaining(t, d, "requests"); r != 2+5+7 {
		t.Fatalf("remaining %d after 8 of 10 included, want 14 (2 included + 12 in grants)", r)
	}
	if grantLeft(t, st, "order", "first") != 5 {
		t.Fatal("a grant was drawn while the included quota covered the cost")
	}
	d = limitertest.Allowed(t, l, "order", limiter.Request{Cost: 4}) // 2 included + 2 of first
	if a, b := grantLeft(t, st, "order", "first"), grantLeft(t, st, "order", "second"); a != 3 || b != 7 {
		t.Fatalf("grants left %d, %d; want 3, 7 (the first drawn first)", a, b)
	}
	if r := limitertest.Remaining(t, d, "requests"); r != 10 {
		t.Fatalf("remaining %d, want 10", r)
	}
	limitertest.Allowed(t, l, "order", limiter.Request{Cost: 5}) // 3 of first + 2 of second
	if a, b := grantLeft(t, st, "order", "first"), grantLeft(t, st, "order", "second"); a != 0 || b != 5 {
		t.Fatalf("grants left %d, %d; want 0, 5", a, b)
	}
	// A cost over what is left is refused and takes nothing.
	d = limitertest.Refused(t, l, "order", limiter.Request{Cost: 6}, "requests")
	if r := limitertest.Remaining(t, d, "requests"); r != 5 {
		t.Fatalf("remaining on refusal %d, want 5", r)
	}
	if grantLeft(t, st, "order", "second") != 5 {
		t.Fatal("a refused request drew a grant")
	}
	// A peek (the general decision) sees the grants too.
	d = limitertest.Allowed(t, l, "order", limiter.Request{Cost: 5, Peek: true})
	if r := limitertest.Remaining(t, d, "requests"); r != 5 || grantLeft(t, st, "order", "second") != 5 {
		t.Fatalf("a peek: remaining %d, second left %d; want 5 and 5 (a peek takes nothing)", r, grantLeft(t, st, "order", "second"))
	}
	limitertest.Refused(t, l, "order", limiter.Request{Cost: 6, Peek: true}, "requests")
	limitertest.Allowed(t, l, "order", limiter.Request{Cost: 5})
	limitertest.Refused(t, l, "order", limiter.Request{Cost: 1}, "requests")

	// Soft: the grants first, then overage.
	put(t, st, snapshot("soft", hardQuota(10, limiter.ModeSoft)))
	putGrants(t, st, "soft", grant("s1", 5))
	limitertest.Allowed(t, l, "soft", limiter.Request{Cost: 12}) // 10 included + 2 of s1
	if n := grantLeft(t, st, "soft", "s1"); n != 3 {
		t.Fatalf("soft grant left %d, want 3", n)
	}
	limitertest.Allowed(t, l, "soft", limiter.Request{Cost: 5}) // 3 of s1 + 2 overage
	if n := grantLeft(t, st, "soft", "s1"); n != 0 {
		t.Fatalf("soft grant left %d, want 0", n)
	}
	limitertest.Allowed(t, l, "soft", limiter.Request{Cost: 5}) // overage
	used, _, _ := st.Used(context.Background(), "soft", "requests", snapshot("soft", nil).PeriodStart)
	if used != 22 {
		t.Fatalf("soft counter %d, want 22", used)
	}

	// A tenant without grants: the hard quota refuses at the included units.
	put(t, st, snapshot("none", hardQuota(3, limiter.ModeHard)))
	limitertest.Allowed(t, l, "none", limiter.Request{Cost: 3})
	limitertest.Refused(t, l, "none", limiter.Request{Cost: 1}, "requests")
}

// A grant is drawn from its effective_at to its expires_at by Redis's
// clock; a refusal while one is pending retries when it takes effect (if
// before the period's end); a void (the server's PutGrants without it)
// stops its draws within a second.
func TestGrantsTimeAndVoid(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	ctx := context.Background()
	redisNow := func() time.Time {
		tm, err := st.rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}

	// pending, then active
	put(t, st, snapshot("pending", hardQuota(1, limiter.ModeHard)))
	eff := redisNow().Add(3 * time.Second)
	putGrants(t, st, "pending", keyspace.Grant{ID: "later", Meter: "requests", EffectiveAt: eff, Remaining: 4})
	limitertest.Allowed(t, l, "pending", limiter.Request{Cost: 1})
	d := limitertest.Refused(t, l, "pending", limiter.Request{Cost: 1}, "requests")
	if d.RetryAfter > 3*time.Second+time.Second || d.RetryAfter > 24*time.Hour {
		t.Fatalf("RetryAfter %v, want about 3 s (the grant taking effect), not the period's end", d.RetryAfter)
	}
	limitertest.Eventually(t, 20*time.Second, "the pending grant takes effect", func() bool {
		d, err := l.Allow(ctx, "pending", limiter.Request{Cost: 4})
		return err == nil && d.Allowed
	})
	if !redisNow().After(eff) {
		t.Fatal("drawn before its effective_at by Redis's clock")
	}

	// active, then expired
	put(t, st, snapshot("expiring", hardQuota(0, limiter.ModeHard)))
	exp := redisNow().Add(2 * time.Second)
	putGrants(t, st, "expiring", keyspace.Grant{ID: "soon", Meter: "requests", EffectiveAt: redisNow().Add(-time.Minute), ExpiresAt: exp, Remaining: 1000})
	limitertest.Allowed(t, l, "expiring", limiter.Request{Cost: 1})
	limitertest.Eventually(t, 20*time.Second, "the grant expires", func() bool {
		d, err := l.Allow(ctx, "expiring", limiter.Request{Cost: 1})
		return err == nil && !d.Allowed
	})
	if redisNow().Before(exp) {
		t.Fatal("refused before expires_at by Redis's clock")
	}

	// void: the server writes the list without it
	put(t, st, snapshot("void", hardQuota(0, limiter.ModeHard)))
	putGrants(t, st, "void", grant("v", 1000))
	limitertest.Allowed(t, l, "void", limiter.Request{Cost: 1})
	putGrants(t, st, "void")
	took := limitertest.Eventually(t, 10*time.Second, "a voided grant stops being drawn", func() bool {
		d, err := l.Allow(ctx, "void", limiter.Request{Cost: 1})
		return err == nil && !d.Allowed
	})
	if took > time.Second {
		t.Errorf("void took %v, want within a second", took)
	}
	// Its unflushed draw keeps it (closed) for the flush.
	gs, err := st.keys.Grants(ctx, st.rdb, "void", "requests")
	if err != nil || len(gs) != 1 || !gs[0].Closed || gs[0].Remaining != 999 {
		t.Fatalf("grants after the void %+v, %v; want the closed grant kept for its flush", gs, err)
	}
}

// After Redis lost the tenant's state (the hash deleted), the grants are
// rebuilt from the ledger (GrantLoader) before a decision draws them: the
// units the ledger recorded as drawn are not given again, and nothing is
// given twice.
func TestGrantsRebuiltAfterRedisLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		st := newStore(b.client(), b.prefix)
		var lg ledger
		durable := map[string]int64{}
		var mu sync.Mutex
		usage := func(_ context.Context, tenant, meter string, _ time.Time) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			return durable[tenant], nil
		}
		l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, UsageLoader: usage, GrantLoader: lg.load})
		ctx := context.Background()
		s := snapshot("lost", hardQuota(10, limiter.ModeHard))
		put(t, st, s)
		lg.set("lost", grant("a", 20), grant("b", 5))
		// as the server writes new grants
		putGrants(t, st, "lost", grant("a", 20), grant("b", 5))
		for i := 0; i < 25; i++ { // 10 included + 15 of a
			limitertest.Allowed(t, l, "lost", limiter.Request{Cost: 1})
		}
		if n := grantLeft(t, st, "lost", "a"); n != 5 {
			t.Fatalf("a left %d, want 5", n)
		}
		// The flush recorded usage 25 and a's 15 in the ledger; then Redis
		// loses the hash.
		mu.Lock()
		durable["lost"] = 25
		mu.Unlock()
		lg.set("lost", grant("a", 5), grant("b", 5))
		if err := st.rdb.Del(ctx, st.keys.State("lost")).Err(); err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for i := 0; i < 30; i++ {
			d, err := l.Allow(ctx, "lost", limiter.Request{Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 10 {
			t.Fatalf("admitted %d after the loss, want 10 (5 left in a, 5 in b; nothing free, nothing twice)", admitted)
		}
		if lg.calls.Load() == 0 {
			t.Fatal("the ledger was never read")
		}
		if a, b := grantLeft(t, st, "lost", "a"), grantLeft(t, st, "lost", "b"); a != 0 || b != 0 {
			t.Fatalf("left %d, %d after the rebuild, want 0, 0", a, b)
		}
	})
}

// The seed refuses a rebuild read before a flush's lost claim was
// committed (the epoch moved): the grants are read again, never seeded
// from the stale figure.
func TestGrantsRebuildRespectsEpoch(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	ctx := context.Background()
	ok, err := st.keys.PutGrantsAt(ctx, st.rdb, "ep", 0, []keyspace.Grant{grant("x", 9)})
	if err != nil || !ok {
		t.Fatalf("PutGrantsAt = %v, %v", ok, err)
	}
	if err := st.rdb.HIncrBy(ctx, st.keys.State("ep"), "e", 1).Err(); err != nil {
		t.Fatal(err)
	}
	ok, err = st.keys.PutGrantsAt(ctx, st.rdb, "ep", 0, []keyspace.Grant{grant("x", 9), grant("y", 9)})
	if err != nil || ok {
		t.Fatalf("PutGrantsAt with a moved epoch = %v, %v; want refused", ok, err)
	}
	if grantLeft(t, st, "ep", "y") != -1 {
		t.Fatal("seeded under a moved epoch")
	}
	// Redis's remaining wins over the ledger's for a grant it has.
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	put(t, st, snapshot("ep", hardQuota(0, limiter.ModeHard)))
	limitertest.Allowed(t, l, "ep", limiter.Request{Cost: 5})
	putGrants(t, st, "ep", grant("x", 9), grant("y", 9))
	if x, y := grantLeft(t, st, "ep", "x"), grantLeft(t, st, "ep", "y"); x != 4 || y != 9 {
		t.Fatalf("x %d y %d, want 4 (Redis's) and 9 (seeded)", x, y)
	}
	// A write that changes nothing announces nothing (the rebuild at every
	// new period's first decision), one that changes announces the tenant.
	sub := st.rdb.Subscribe(ctx, st.keys.Invalidations())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	gx, gy := grant("x", 9), grant("y", 9)
	putGrants(t, st, "ep", gx, gy) // new times: announced
	if _, err := sub.ReceiveMessage(ctx); err != nil {
		t.Fatal(err)
	}
	putGrants(t, st, "ep", gx, gy) // the same again: not announced
	putGrants(t, st, "ep", gx)     // y dropped: announced
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tn, _ := keyspace.ParseInvalidation(msg.Payload); tn != "ep" {
		t.Fatalf("announced %q", msg.Payload)
	}
	select {
	case m := <-sub.Channel():
		t.Fatalf("another announcement %q: the write of the same grants changed nothing", m.Payload)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := st.keys.PutGrantsAt(ctx, st.rdb, "ep", 1, []keyspace.Grant{{ID: "a b", Meter: "requests"}}); err == nil {
		t.Fatal("an id with a space was written")
	}
}

// oldLayoutGrants packs grants as the state hash held them before the
// numbers and the ids had fields of their own (G:<meter>: the count, then
// effective ms, expires ms and remaining per grant in draw order, then
// the ids), as a Redis written by an earlier version holds them.
func oldLayoutGrants(gs ...keyspace.Grant) string {
	var b []byte
	d := func(f float64) { b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f)) }
	d(float64(len(gs)))
	for _, g := range gs {
		d(float64(g.EffectiveAt.UnixMilli()))
		d(0)
		d(float64(g.Remaining))
	}
	for _, g := range gs {
		b = append(b, g.ID+" "...)
	}
	return string(b)
}

// Grants Redis holds in the layout before (one G:<meter> field) are not
// read by decisions, which then give nothing beyond the included quota
// (no free units, nor grants drawn twice); the next PutGrants (the server's, or the worker's
// sweep, whose first run writes every tenant with an open grant) takes
// over Redis's remainings, draws not flushed yet included, instead of the
// ledger's higher figure, and deletes the old field.
func TestGrantsOldLayoutTakenOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		st := newStore(b.client(), b.prefix)
		var lg ledger
		// each phase a new limiter: its near-cache reads the grants index
		// as the phase left it
		opts := limiter.Options{Prefix: b.prefix, GrantLoader: lg.load}
		ctx := context.Background()
		put(t, st, snapshot("old", hardQuota(10, limiter.ModeHard)))
		limitertest.Allowed(t, newLimiter(t, b.client(), opts), "old", limiter.Request{Cost: 1}) // the counter exists
		// An earlier version drew 10 of a's 100 and has not flushed them
		// (kf 100): the ledger still says 100.
		lg.set("old", grant("a", 100), grant("b", 5))
		h := st.keys.State("old")
		if err := st.rdb.HSet(ctx, h, keyspace.GrantsField, "requests ", "G:requests", oldLayoutGrants(grant("a", 90), grant("b", 5)), keyspace.GrantFlushed("a"), "100", keyspace.GrantFlushed("b"), "5").Err(); err != nil {
			t.Fatal(err)
		}
		l := newLimiter(t, b.client(), opts) // knows the tenant has grants of requests
		admitted := 0
		for i := 0; i < 20; i++ {
			d, err := l.Allow(ctx, "old", limiter.Request{Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 9 {
			t.Fatalf("admitted %d before the takeover, want the 9 included left (the old field gives nothing)", admitted)
		}
		putGrants(t, st, "old", grant("a", 100), grant("b", 5))
		if a, bl := grantLeft(t, st, "old", "a"), grantLeft(t, st, "old", "b"); a != 90 || bl != 5 {
			t.Fatalf("after the takeover a %d, b %d; want Redis's 90 and 5, not the ledger's 100", a, bl)
		}
		if n, err := st.rdb.HExists(ctx, h, "G:requests").Result(); err != nil || n {
			t.Fatalf("the old field is still there (%v, %v)", n, err)
		}
		if kf, err := st.rdb.HGet(ctx, h, keyspace.GrantFlushed("a")).Result(); err != nil || kf != "100" {
			t.Fatalf("a's flushed mark %q (%v), want 100: the 10 drawn are still to flush", kf, err)
		}
		l = newLimiter(t, b.client(), opts)
		admitted = 0
		for i := 0; i < 120; i++ {
			d, err := l.Allow(ctx, "old", limiter.Request{Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 95 {
			t.Fatalf("admitted %d after the takeover, want 95 (90 of a, 5 of b)", admitted)
		}
	})
}

// Three and four grants (the grants are stored last drawn first, and a
// draw from the first two packs the field in one string; later ones, and
// longer lists, take other paths of the same walk): every decision draws
// what a model of "included first, then the grants in order" says, each
// grant's remaining after each decision, in the common plan's decision (a
// rate and a quota), a quota's alone and the general one, with costs that
// cross from one grant to the next.
func TestGrantsManyDrawnInOrder(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	ctx := context.Background()
	for _, n := range []int{3, 4} {
		for _, mode := range []string{"common", "quota", "general"} {
			general := mode == "general"
			for _, cost := range []int64{1, 2} {
				tenant := fmt.Sprintf("many-%d-%s-%d", n, mode, cost)
				s := snapshot(tenant, hardQuota(1, limiter.ModeHard))
				if general {
					s.Concurrency = 1000
				}
				if mode == "common" {
					// the common plan's script draws (grant_scan)
					s.Rate = &limiter.Rate{PerSecond: 1e6, Burst: 1e6}
				}
				put(t, st, s)
				want := make([]int64, n) // the model's remainings
				var gs []keyspace.Grant
				for i := range want {
					want[i] = int64(i + 2)
					gs = append(gs, grant(fmt.Sprintf("g%d", i), want[i]))
				}
				putGrants(t, st, tenant, gs...)
				inc, left := int64(1), int64(1)
				for _, w := range want {
					left += w
				}
				for step := 0; ; step++ {
					d, err := l.Allow(ctx, tenant, limiter.Request{Cost: cost, Concurrency: general})
					if err != nil {
						t.Fatal(err)
					}
					if left < cost {
						if d.Allowed {
							t.Fatalf("%s step %d: allowed with %d left for a cost of %d", tenant, step, left, cost)
						}
						break
					}
					if !d.Allowed {
						t.Fatalf("%s step %d: refused with %d left for a cost of %d", tenant, step, left, cost)
					}
					_ = d.Release(ctx)
					c := cost
					t0 := min(c, inc)
					inc -= t0
					c -= t0
					for i := range want {
						t1 := min(c, want[i])
						want[i] -= t1
						c -= t1
					}
					left -= cost
					for i, w := range want {
						if got := grantLeft(t, st, tenant, fmt.Sprintf("g%d", i)); got != w {
							t.Fatalf("%s step %d: g%d left %d, want %d", tenant, step, i, got, w)
						}
					}
				}
			}
		}
	}
}

// A draw from the second grant repacks the first grant's numbers: a first
// grant that is not drawn from (pending, or expired with units left) keeps
// exactly what it had, in every decision path.
func TestGrantsSecondDrawKeepsTheFirstGrant(t *testing.T) {
	b := singleRedis(t)
	st := newStore(b.client(), b.prefix)
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix})
	for _, mode := range []string{"common", "quota", "general"} {
		for _, first := range []string{"pending", "expired"} {
			tenant := "second-" + mode + "-" + first
			s := snapshot(tenant, hardQuota(1, limiter.ModeHard))
			switch mode {
			case "general":
				s.Concurrency = 1000
			case "common":
				s.Rate = &limiter.Rate{PerSecond: 1e6, Burst: 1e6}
			}
			put(t, st, s)
			held := grant("held", 50)
			if first == "pending" {
				held.EffectiveAt = time.Now().Add(time.Hour)
			} else {
				held.EffectiveAt, held.ExpiresAt = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
			}
			putGrants(t, st, tenant, held, grant("drawn", 10))
			for i := 0; i < 4; i++ { // 1 included, then 3 of "drawn"
				limitertest.Allowed(t, l, tenant, limiter.Request{Cost: 1})
			}
			if n := grantLeft(t, st, tenant, "drawn"); n != 7 {
				t.Fatalf("%s: drawn left %d, want 7", tenant, n)
			}
			if n := grantLeft(t, st, tenant, "held"); n != 50 {
				t.Fatalf("%s: the %s first grant left %d, want its 50 untouched", tenant, first, n)
			}
		}
	}
}
