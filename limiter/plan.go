package limiter

import (
	"encoding/binary"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// This file turns a snapshot or explicit limits into a plan: the policies of
// one decision with their keys and script arguments, built once and shared.

// policy is one policy of a decision, in header order.
type policy struct {
	typ    byte // 'r', 'w' (sliding window), 'f' (fixed window), 'q', 'c'
	name   string
	limit  int64
	window time.Duration
	mode   QuotaMode
	quota  *preparedQuota
	rate   Rate
	a, b   string
	c, d   string
	ei     float64  // r: emission interval, µs
	keys   []string // c and w: their own key (r and q live in plan.hash)
	fail   FailMode
}

// plan is what one decision checks.
type plan struct {
	tenant   string
	planName string
	refKey   string // refusal cache key
	hash     string // KEYS[1]: the hash of the bucket and the counters
	base     string // keyNames.tenantBase
	rfBase   string
	dirty    string // dirty marks' prefix (keyNames.dirtyBase)
	pol      []policy
	nkeys    int
	explicit bool
	// grants: the tenant has grants of the quota's meter, drawn by
	// fastGrantsBody (or the general decision, told by hardArg).
	grants bool

	// Ready to send (read-only once built, shared by concurrent decisions):
	// the script's KEYS, ARGV from the 4th on with the per-policy
	// arguments, boxed once, so that a decision copies them and sets the
	// first three.
	keys []string
	args []any
	// fast is fastBody's ARGV from the 2nd on, for the plan of a token
	// bucket and one quota (nil for other plans); seed is whether the
	// limiter has a UsageLoader.
	fast []any

	// floor is, per period (0 current, 1 next), the least the hard
	// quota's counter held after the last decision this process made on
	// it (limit − remaining): a counter found below it went back, which
	// only a Redis rollback does (a replica promoted after losing writes;
	// or a refund, which rebase tells apart), and is checked against
	// Postgres before it is used (see fastBody, rebase). Kept per tenant
	// across snapshot re-reads (tenantFloors), nil for plans without one.
	floor  [2]*atomic.Int64
	packed atomic.Pointer[packedFloors]

	// src is the snapshot a snapshot plan was built from: a decision whose
	// window has not begun by Redis's clock is made on its earlier window
	// (earlier).
	src *prepared
}

// earlier returns the plan of req on the window before the snapshot's,
// for a decision Redis made no sense of because the snapshot's window has
// not begun by Redis's clock (its writer's clock was ahead); nil when the
// snapshot does not know that window.
func (l *Limiter) earlier(pl *plan, req *Request) *plan {
	p := pl.src
	if p == nil || p.snap.PrevPeriodStart.IsZero() || !p.snap.PrevPeriodStart.Before(p.snap.PeriodStart) {
		return nil
	}
	p.earlierOnce.Do(func() {
		s := p.snap
		s.PrevPeriodStart, s.PeriodStart, s.PeriodEnd, s.NextPeriodEnd = time.Time{}, s.PrevPeriodStart, s.PeriodStart, s.PeriodEnd
		e := l.keys.prepareWith(s, p.grants)
		e.floors, e.fromLoader = p.floors, p.fromLoader
		p.earlier = e
	})
	return l.snapshotPlan(p.earlier, req)
}

// tenantFloors holds a tenant's counter floors (plan.floor) by counter
// suffix. It outlives the tenant's cached snapshot: a failover renews the
// invalidation subscription, which has every snapshot read again, and
// the floors must still be there for the first decision after it.
type tenantFloors struct {
	mu sync.Mutex
	m  map[string]*atomic.Int64
}

func (t *tenantFloors) get(sfx string) *atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*atomic.Int64{}
	}
	f, ok := t.m[sfx]
	if !ok {
		if len(t.m) >= 16 { // ended periods' counters: a few per meter
			clear(t.m)
		}
		f = new(atomic.Int64)
		t.m[sfx] = f
	}
	return f
}

// raiseFloor notes that the quota's counter of period held at least v.
func (pl *plan) raiseFloor(period int64, v int64) {
	f := pl.floor[period&1]
	if f == nil {
		return
	}
	for {
		old := f.Load()
		if v <= old || f.CompareAndSwap(old, v) {
			return
		}
	}
}

// fastArg is fastBody's packed plan with this process's floors in it,
// rounded down to a step of 1/256 of the limit: a packed plan changes only
// every step units, so that decisions in between send Redis the same
// string (Lua interns every ARGV: a new string per decision cost the
// script 3% more), and it is built here only then. A rollback by less
// than a step below what this process saw is left to the flush's check.
func (pl *plan) fastArg() any {
	if pl.floor[0] == nil {
		return pl.fast[0]
	}
	step := max(pl.pol[1].limit/256, 1)
	f0, f1 := pl.floor[0].Load(), pl.floor[1].Load()
	f0, f1 = f0-f0%step, f1-f1%step
	if f0 == 0 && f1 == 0 {
		return pl.fast[0]
	}
	if c := pl.packed.Load(); c != nil && c.f0 == f0 && c.f1 == f1 {
		return c.arg
	}
	s := pl.fast[0].(string)
	b := make([]byte, len(s))
	copy(b, s)
	binary.LittleEndian.PutUint64(b[8*fastFloor:], math.Float64bits(float64(f0)))
	binary.LittleEndian.PutUint64(b[8*fastFloor+8:], math.Float64bits(float64(f1)))
	c := &packedFloors{f0: f0, f1: f1, arg: string(b)}
	pl.packed.Store(c)
	return c.arg
}

// packedFloors is fastArg's last packed plan, for the floors it holds.
type packedFloors struct {
	f0, f1 int64
	arg    any
}

// fastFloor is the index of the first floor among fastBody's packed numbers.
const fastFloor = 12

// snapshotPlan returns the plan of a request on a cached snapshot. Plans
// are built once per snapshot and request shape, so that a decision in
// steady state formats no key and boxes no argument.
func (l *Limiter) snapshotPlan(p *prepared, req *Request) *plan {
	k := planKey{skipQuota: req.SkipQuota, concurrent: req.Concurrency && p.conc > 0}
	if !req.SkipQuota && p.quotas[req.Meter] != nil {
		k.meter = req.Meter
	}
	if v, ok := p.plans.Load(k); ok {
		return v.(*plan)
	}
	pl := &plan{tenant: p.snap.TenantID, planName: p.snap.Plan, refKey: p.snap.TenantID, hash: p.state, base: p.base, rfBase: p.rfBase, dirty: p.dirty, src: p}
	pl.pol = make([]policy, 0, 3)
	if r := p.rate; r != nil {
		pl.add(policy{typ: 'r', name: policyRate, limit: r.rate.Burst, window: r.window, rate: r.rate, a: r.ei, b: r.burst, ei: r.eiF, fail: l.opts.FailMode.Rate})
	}
	for i := range p.windows {
		pl.add(p.windows[i].policy(l.opts.FailMode.Window))
	}
	if k.meter != "" {
		q := p.quotas[k.meter]
		pl.add(policy{typ: 'q', name: q.meter, limit: q.limit, mode: q.mode, quota: q, a: q.limitS, b: hardArg(q), c: q.endS, d: q.nextS, fail: l.opts.FailMode.Quota})
		pl.grants = q.grants
	}
	if k.concurrent {
		pl.add(policy{typ: 'c', name: policyConcurrency, limit: p.conc, a: strconv.FormatInt(p.conc, 10), b: strconv.FormatInt(l.opts.LeaseTTL.Milliseconds(), 10), keys: []string{p.concKey}, fail: l.opts.FailMode.Concurrency})
	}
	pl.finish(l.opts.UsageLoader != nil)
	if pl.fast != nil && p.floors != nil && pl.pol[1].quota.hard {
		q := pl.pol[1].quota
		pl.floor = [2]*atomic.Int64{p.floors.get(q.sfx[0]), p.floors.get(q.sfx[1])}
	}
	v, _ := p.plans.LoadOrStore(k, pl)
	return v.(*plan)
}

// finish builds the script's keys and fixed arguments (see decideBody and
// fastBody).
func (pl *plan) finish(seed bool) {
	pl.keys = make([]string, 0, 1+pl.nkeys)
	pl.keys = append(pl.keys, pl.hash)
	pl.args = make([]any, 0, 5+11*len(pl.pol))
	pl.args = append(pl.args, pl.base, "", "", len(pl.pol), pl.dirty) // ARGV 4-8; 5 and 6 are set per call
	for _, p := range pl.pol {
		pl.keys = append(pl.keys, p.keys...)
		pl.args = append(pl.args, string(p.typ), p.name, p.a, p.b)
		if p.typ == 'q' {
			f := p.quota.fields
			pl.args = append(pl.args, p.c, p.d, f[0], f[1], f[2], f[3], p.quota.startS)
		}
	}
	if len(pl.pol) == 2 && pl.pol[0].typ == 'r' && pl.pol[1].typ == 'q' && pl.nkeys == 0 {
		r, q := pl.pol[0], pl.pol[1].quota
		f := q.fields
		nums := []float64{r.ei, float64(r.rate.Burst), float64(q.limit), 0, float64(q.endMs), float64(q.nextMs), 0,
			float64(len(f[0])), float64(len(pl.base)), float64(len(pl.dirty)), float64(len(q.meter)), float64(len(f[2])),
			0, 0, // the floors (fastArg)
			float64(q.startMs)}
		if q.hard {
			nums[3] = 1
		}
		if seed {
			nums[6] = 1
		}
		b := make([]byte, 8*len(nums))
		for i, v := range nums {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		}
		pl.fast = []any{string(b) + f[0] + f[1] + pl.base + pl.dirty + q.meter + f[2] + f[3]}
		if pl.grants {
			// fastGrantsBody's field of the meter's grants, at the end
			pl.fast[0] = pl.fast[0].(string) + keyspace.GrantsOf(q.meter)
		}
	}
}

func (l *Limiter) explicitPlan(tenant string, req *Request) *plan {
	x := req.Limits
	pl := &plan{tenant: tenant, refKey: "\x00" + tenant, hash: l.keys.explicitRate(tenant), base: l.keys.tenantBase(tenant), rfBase: l.keys.refusalBase(tenant), dirty: l.keys.dirtyBase(tenant), explicit: true}
	if x.Rate != nil {
		r := prepareRate(pl.hash, x.Rate)
		pl.add(policy{typ: 'r', name: policyRate, limit: r.rate.Burst, window: r.window, rate: r.rate, a: r.ei, b: r.burst, ei: r.eiF, fail: l.opts.FailMode.Rate})
	}
	for _, w := range x.Windows {
		pl.add(policy{typ: windowTyp(&w), name: w.Name, limit: w.Limit, window: w.Length, a: strconv.FormatInt(w.Limit, 10), b: strconv.FormatInt(w.Length.Milliseconds(), 10), keys: []string{l.keys.explicitWindow(tenant, &w)}, fail: l.opts.FailMode.Window})
	}
	if req.Concurrency && x.Concurrency > 0 {
		pl.add(policy{typ: 'c', name: policyConcurrency, limit: x.Concurrency, a: strconv.FormatInt(x.Concurrency, 10), b: strconv.FormatInt(l.opts.LeaseTTL.Milliseconds(), 10), keys: []string{l.keys.explicitConcurrency(tenant)}, fail: l.opts.FailMode.Concurrency})
	}
	pl.finish(l.opts.UsageLoader != nil)
	return pl
}

func (pl *plan) add(p policy) {
	pl.pol = append(pl.pol, p)
	pl.nkeys += len(p.keys)
}

// mark is the dirty mark of the quota's counter of period (0 current, 1
// next; see keys.go), from the plan's key base, so that a prepared quota
// names nothing of its tenant and plans by reference can share it.
func (pl *plan) mark(q *preparedQuota, period int64) string {
	return pl.base + "qp:" + q.sfx[period]
}

// hardArg is decideBody's hard argument of a quota: 1 hard, 0 soft, plus 2
// when the tenant has grants of its meter (then the decision reads them).
func hardArg(q *preparedQuota) string {
	switch {
	case q.grants && q.hard:
		return "3"
	case q.grants:
		return "2"
	}
	return boolArg(q.hard)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
