package limiter

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the prefetch mode (Options.Prefetch): a Limiter takes
// tokens and quota units from Redis in chunks and decides locally from what
// it holds.
//
// A take is an exact-mode decision whose cost is the chunk, run through the
// same decision script (all policies, all or nothing, Redis TIME), so what
// all instances admit together never exceeds a limit: every unit admitted
// locally was first taken in Redis. Unused quota units go back with one
// script call each (pipelined, leaseReturnScript): the refund Settle and
// Cancel make, marked so that a retry never refunds twice, so the counters
// and the pending usage the worker flushes stay right. Unused tokens are
// not returned: they refill with time, and the chunk is sized so that
// little is left over.
//
// Plentiful limits (every hard policy had leasePlentiful × instances times
// the chunk left) get chunks sized on a longer horizon and leases that live
// until leaseIdle after their last use: holding them costs nobody
// anything, and a tenant seen every few seconds keeps its lease instead of
// taking and giving back each time. Near a limit a lease lives leaseShort
// from its take, with chunks of about a second of use.
//
// A plan's windows are leased like the rate (a window's unused units are
// not returned: they end with the window), and no lease outlives the
// current window of a plan window (windowsEnd), so every unit is admitted
// in the window Redis counted it in.
//
// Only snapshot plans of rate, window and quota policies are leased. Peeks,
// reservations, concurrency slots and explicit Limits stay exact; so does a
// tenant decided by reference (the near-cache full), which has no plan to
// hang a lease on.

const (
	// leaseIdle is the life of a plentiful lease (see leasePlentiful) after
	// its last use: its unused units go back when it ends. Holding them
	// costs nobody anything (usage shown runs ahead by at most the
	// remainder), while taking and giving back costs Redis calls; a tenant
	// that pauses for a few seconds keeps its lease.
	leaseIdle = 10 * time.Second
	// leaseHorizon is how much of the observed rate a chunk holds near a
	// limit; leasePlentyHorizon when the last take was plentiful.
	leaseHorizon       = time.Second
	leasePlentyHorizon = 10 * time.Second
	// leaseGrow bounds how fast chunks grow a take: a burst of a few calls
	// in a microsecond is no rate to hold a large share of a limit for.
	// After a plentiful lease that was used up before it expired, chunks
	// may grow leasePlentyGrow times (a tenant seen now and then reaches a
	// chunk that lasts in a few takes).
	leaseGrow       = 4
	leasePlentyGrow = 8
	// leasePlentyMin is the smallest chunk taken after a plentiful lease ran
	// out (a tenant seen again before its lease expired, likely to be seen
	// more): a few dozen units of a plentiful limit cost nobody anything and
	// spare a take every few decisions.
	leasePlentyMin = 64
	// leaseShort is the life of a lease near a limit, so that units other
	// instances may need flow back soon.
	leaseShort = 200 * time.Millisecond
	// leaseShares bounds a chunk to 1/(leaseShares × ExpectedInstances) of
	// a limit and of what Redis last said was left: instances share the
	// rest, and near a limit chunks shrink with what is left.
	leaseShares = 4
	// leasePlentiful: a lease is long-lived when every hard policy had at
	// least leasePlentiful × ExpectedInstances times the chunk left after
	// the take.
	leasePlentiful = 16
	// leaseFirst is the first chunk, before any rate is observed: one
	// unit, as exact mode takes, so that a tenant seen once costs one trip
	// and leaves nothing to give back.
	leaseFirst = 1
	// leaseSweepEvery is how often expired leases give their units back.
	leaseSweepEvery = 50 * time.Millisecond
	// leaseDryMax bounds how long a refused take keeps a pool from taking
	// again (decisions meanwhile are exact, or cached refusals).
	leaseDryMax = time.Second
	// leaseCloseTimeout bounds the returns of Close.
	leaseCloseTimeout = 3 * time.Second
	// leaseReturnBatch is how many remainders go back in one pipeline.
	leaseReturnBatch = 256
	// leaseReturnTTL is how long Redis remembers a return made, so that
	// one retried after a lost reply is not refunded twice.
	leaseReturnTTL = 10 * time.Minute
)

// errNoLease says that the request must be decided exactly: no units could
// be taken (refused), or the leases are closing.
var errNoLease = errors.New("limiter: no lease")

// leases holds the leased mode's pools, one per tenant and quota meter.
// A pool remembers the plan it took under; a decision on a plan with other
// limits (a new snapshot) drops it, so units taken under the old limits
// never decide under the new ones.
type leases struct {
	l     *Limiter
	pmu   sync.RWMutex
	pools map[poolKey]*leasePool

	mu     sync.Mutex // guards closed and takes.Add
	closed bool
	takes  sync.WaitGroup // takes in flight

	retMu   sync.Mutex
	returns []leaseReturn // remainders waiting for the sweeper

	stop chan struct{}
	done chan struct{}
}

// leaseChunk is the unused part of one take and the quota counter it came
// from (nil for a plan without a quota: nothing to give back).
type leaseChunk struct {
	rsv  *rsvTarget
	left int64
}

// leaseReturn is a remainder to give back. id names its mark in Redis, so
// that a return retried after a lost reply is not refunded twice; since is
// when it was queued (see requeue).
type leaseReturn struct {
	tenant string
	leaseChunk
	id    string
	since time.Time
}

// poolKey names a pool: the tenant and the meter of the plan's quota (""
// for a plan without one, or a request that skips it).
type poolKey struct{ tenant, meter string }

func keyOf(pl *plan) poolKey {
	k := poolKey{tenant: pl.tenant}
	for i := range pl.pol {
		if pl.pol[i].typ == 'q' {
			k.meter = pl.pol[i].name
		}
	}
	return k
}

// leasePool holds the units of one tenant and meter.
type leasePool struct {
	key poolKey
	pl  *plan // the plan the units were taken under

	mu      sync.Mutex
	held    int64
	chunks  []leaseChunk // oldest first
	expires time.Time
	dead    bool // revoked, closed or swept: look the pool up again

	// What the last take said, to answer local decisions: its policies
	// (remaining after the take) and when it was made.
	tmpl    []PolicyStatus
	takenAt time.Time

	// Chunk sizing: units admitted since the last take, the rate observed
	// (units/s, smoothed), and until when a refused take keeps the pool dry.
	used     int64
	rate     float64
	last     int64 // the last chunk taken
	dryUntil time.Time
	// plenty: the last take left every hard policy plentiful; the lease
	// then lives until leaseIdle after its last use.
	plenty bool
	// until is when the current window of the plan's windows that ends
	// first ends (zero without windows): no lease outlives it, so a unit
	// is admitted in the window it was counted in (windowsEnd).
	until time.Time

	taking chan struct{} // non-nil while a take is in flight; closed when it ends
}

func newLeases(l *Limiter) *leases {
	ls := &leases{l: l, pools: map[poolKey]*leasePool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go ls.sweepLoop()
	return ls
}

// covers says whether a request is decided from leases.
func (ls *leases) covers(pl *plan, req *Request) bool {
	// A quota with grants is decided exactly: a lease's remainder goes
	// back to the counter only, not to the grants it may have drawn.
	if pl.explicit || req.Peek || req.Reserve || pl.grants {
		return false
	}
	for i := range pl.pol {
		if t := pl.pol[i].typ; t != 'r' && t != 'q' && t != 'w' && t != 'f' {
			return false
		}
	}
	return true
}

func (ls *leases) pool(pl *plan) *leasePool {
	k := keyOf(pl)
	ls.pmu.RLock()
	p := ls.pools[k]
	ls.pmu.RUnlock()
	if p != nil {
		return p
	}
	ls.pmu.Lock()
	defer ls.pmu.Unlock()
	if p := ls.pools[k]; p != nil {
		return p
	}
	p = &leasePool{key: k, pl: pl}
	ls.pools[k] = p
	return p
}

// forget removes a dead pool.
func (ls *leases) forget(p *leasePool) {
	ls.pmu.Lock()
	if ls.pools[p.key] == p {
		delete(ls.pools, p.key)
	}
	ls.pmu.Unlock()
}

// all returns the pools, for the sweeper, revocations and Close.
func (ls *leases) all() []*leasePool {
	ls.pmu.RLock()
	defer ls.pmu.RUnlock()
	ps := make([]*leasePool, 0, len(ls.pools))
	for _, p := range ls.pools {
		ps = append(ps, p)
	}
	return ps
}

// usableLocked says whether p may decide on pl: not dead, and taken under
// the same limits. A pool whose limits changed is killed here and its
// units queued to go back; the caller forgets it.
func (ls *leases) usableLocked(p *leasePool, pl *plan) bool {
	if p.dead {
		return false
	}
	if p.pl != pl && !sameLimits(p.pl, pl) {
		p.dead = true
		ls.queue(p.key.tenant, p.detachLocked())
		return false
	}
	return true
}

// sameLimits compares two plans' policies by what the script is told of
// them (limits, rates, modes, period ends), their state hash and the
// counters' fields (the period).
func sameLimits(a, b *plan) bool {
	if len(a.pol) != len(b.pol) {
		return false
	}
	if a.hash != b.hash {
		return false
	}
	for i := range a.pol {
		x, y := &a.pol[i], &b.pol[i]
		if x.typ != y.typ || x.name != y.name || x.a != y.a || x.b != y.b || x.c != y.c || x.d != y.d {
			return false
		}
		if x.quota != nil && (y.quota == nil || x.quota.fields != y.quota.fields) {
			return false
		}
	}
	return true
}

// fromHeld admits req from the units already held for its plan, or
// returns nil.
func (ls *leases) fromHeld(pl *plan, req *Request) *Decision {
	ls.pmu.RLock()
	p := ls.pools[keyOf(pl)]
	ls.pmu.RUnlock()
	if p == nil {
		return nil
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held < req.Cost || !now.Before(p.expires) || !ls.usableLocked(p, pl) {
		return nil // allow forgets a dead pool
	}
	return p.admitLocked(req.Cost, now)
}

// allow decides req from the units held for its plan, taking more from
// Redis when they run out. Errors wrapping errRedisDown go to the fail modes
// (a lease already held is used until it expires, Redis or not).
func (ls *leases) allow(ctx context.Context, pl *plan, req *Request, due *prepared) (*Decision, error) {
	l := ls.l
	for waited := false; ; {
		if waited {
			// The caller before us may have been refused; its refusal is
			// cached, as in exact mode.
			if d := l.cachedRefusal(pl, req); d != nil {
				return d, nil
			}
		}
		p := ls.pool(pl)
		now := time.Now()
		p.mu.Lock()
		switch {
		case !ls.usableLocked(p, pl):
			p.mu.Unlock()
			ls.forget(p)
			continue
		case p.held >= req.Cost && now.Before(p.expires):
			d := p.admitLocked(req.Cost, now)
			p.mu.Unlock()
			return d, nil
		case p.taking != nil:
			w := p.taking
			p.mu.Unlock()
			select {
			case <-w:
				waited = true
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// This caller goes to Redis for the pool, the others wait for it:
		// one call at a time per pool, even while it is dry.
		p.taking = make(chan struct{})
		if now.Before(p.dryUntil) {
			p.mu.Unlock()
			defer p.endTake()
			return ls.exact(ctx, pl, req, due)
		}
		// Whatever the expired lease left goes back (by the sweeper, off
		// this request's path).
		ranOut := now.Before(p.expires)
		if !ranOut && p.held > 0 {
			ls.queue(p.key.tenant, p.detachLocked())
		}
		n := p.chunkLocked(req.Cost, now, l.opts.ExpectedInstances, ranOut)
		p.mu.Unlock()
		defer p.endTake()
		d, err := ls.take(ctx, p, req, due, n)
		if errors.Is(err, errNoLease) {
			return ls.exact(ctx, pl, req, due)
		}
		return d, err
	}
}

// exact decides req as exact mode does, caching a refusal before the
// callers waiting on the pool look for it.
func (ls *leases) exact(ctx context.Context, pl *plan, req *Request, due *prepared) (*Decision, error) {
	d, err := ls.l.decide(ctx, pl, req, due)
	if err == nil && !d.Allowed && d.Fallback == "" {
		ls.l.cacheRefusal(pl, req, d)
	}
	return d, err
}

func (p *leasePool) endTake() {
	p.mu.Lock()
	close(p.taking)
	p.taking = nil
	p.mu.Unlock()
}

// take takes a chunk of n units (or, refused, what Redis says is left if
// that covers req) into p and admits req from it. errNoLease: nothing was
// taken, decide req exactly.
func (ls *leases) take(ctx context.Context, p *leasePool, req *Request, due *prepared, n int64) (*Decision, error) {
	l := ls.l
	var d *Decision
	var err error
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return nil, errNoLease
	}
	ls.takes.Add(1)
	ls.mu.Unlock()
	defer ls.takes.Done()
	if l.redisDown() {
		return nil, errRedisDown
	}
	// Reserve makes the decision name the quota counter taken from (for the
	// return); leaseTake keeps a refused take out of the refusal counts.
	treq := Request{Cost: n, Meter: req.Meter, SkipQuota: req.SkipQuota, Reserve: true, leaseTake: true}
	d, err = l.decide(ctx, p.pl, &treq, due)
	if err != nil {
		return nil, err
	}
	if !d.Allowed {
		if m := leftOf(p.pl, d); m >= req.Cost && m < n {
			treq.Cost = m
			if d, err = l.decide(ctx, p.pl, &treq, nil); err != nil {
				return nil, err
			}
		}
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !d.Allowed {
		p.dryUntil = now.Add(min(max(d.RetryAfter, time.Millisecond), leaseDryMax))
		return nil, errNoLease
	}
	c := leaseChunk{rsv: d.rsv, left: treq.Cost}
	if p.dead {
		// Revoked while the take was in flight: this request was decided
		// by Redis like any exact one; the rest goes back.
		c.left -= req.Cost
		ls.queue(p.key.tenant, []leaseChunk{c})
		return p.decisionOf(d.Policies, c.left, now, now), nil
	}
	p.chunks = append(p.chunks, c)
	p.held += c.left
	p.tmpl = d.Policies
	p.takenAt = now
	p.plenty = plentiful(p.pl, d, c.left, l.opts.ExpectedInstances)
	p.until = windowsEnd(p.pl, d, now)
	p.expires = capUntil(now.Add(leaseShort), p.until)
	return p.admitLocked(req.Cost, now), nil
}

// leftOf returns the fewest units a refused take's reply says are left
// among the policies that can refuse (rate and hard quotas).
func leftOf(pl *plan, d *Decision) int64 {
	m := int64(math.MaxInt64)
	for i := range pl.pol {
		if pl.pol[i].typ == 'q' && pl.pol[i].mode == ModeSoft || i >= len(d.Policies) {
			continue
		}
		m = min(m, d.Policies[i].Remaining)
	}
	return m
}

// plentiful says whether the chunk n is a small share of what every hard
// policy had left after the take: the lease then lives until leaseIdle
// after its last use; near a limit it lives leaseShort from the take.
func plentiful(pl *plan, d *Decision, n int64, instances int) bool {
	for i := range pl.pol {
		if pl.pol[i].typ == 'q' && pl.pol[i].mode == ModeSoft || i >= len(d.Policies) {
			continue
		}
		if d.Policies[i].Remaining/leasePlentiful/int64(instances) < n {
			return false
		}
	}
	return true
}

// chunkLocked sizes the next take: the units the observed rate uses in
// leaseHorizon (near a limit, so that little is left to give back) or
// leasePlentyHorizon (plentiful limits: fewer takes), growing at most
// leaseGrow times a take (leasePlentyGrow after a plentiful lease that ran
// out); bounded by a share of each limit and of what the last take
// said was left (tokens: plus their refill since), and at least the
// request's cost. ranOut: the last lease was used up before it expired.
func (p *leasePool) chunkLocked(cost int64, now time.Time, instances int, ranOut bool) int64 {
	if !p.takenAt.IsZero() {
		if el := now.Sub(p.takenAt).Seconds(); el > 0 {
			r := float64(p.used) / el
			if p.rate == 0 {
				p.rate = r
			} else {
				p.rate = (p.rate + r) / 2
			}
		}
	}
	p.used = 0
	n := int64(leaseFirst)
	horizon := leaseHorizon
	if p.plenty {
		horizon = leasePlentyHorizon
	}
	if p.rate > 0 {
		n = int64(math.Ceil(min(p.rate*horizon.Seconds(), math.MaxInt64/(4*leasePlentyGrow))))
	}
	if p.last > 0 {
		grow := int64(leaseGrow)
		if p.plenty && ranOut {
			grow = leasePlentyGrow
		}
		n = min(n, grow*p.last)
		if p.plenty && ranOut {
			n = max(n, leasePlentyMin)
		}
	}
	share := int64(leaseShares * instances)
	el := now.Sub(p.takenAt).Seconds()
	for i := range p.pl.pol {
		pol := &p.pl.pol[i]
		var capN int64
		switch {
		case pol.typ == 'r':
			capN = pol.rate.Burst / share
			if i < len(p.tmpl) && !p.takenAt.IsZero() {
				avail := float64(p.tmpl[i].Remaining) + pol.rate.PerSecond*el
				capN = min(capN, int64(min(avail, math.MaxInt64/2)))
			}
		case pol.typ == 'q' && pol.mode != ModeSoft, pol.typ == 'w', pol.typ == 'f':
			capN = pol.limit / share
			if i < len(p.tmpl) && !p.takenAt.IsZero() {
				capN = min(capN, p.tmpl[i].Remaining/share)
			}
		default:
			continue
		}
		n = min(n, max(capN, 1))
	}
	n = max(n, cost, 1)
	p.last = n
	return n
}

// admitLocked takes cost units of the pool (the oldest chunk first) and
// answers the decision.
func (p *leasePool) admitLocked(cost int64, now time.Time) *Decision {
	p.held -= cost
	p.used += cost
	if p.plenty {
		p.expires = capUntil(now.Add(leaseIdle), p.until)
	}
	for c := cost; c > 0 && len(p.chunks) > 0; {
		k := min(c, p.chunks[0].left)
		p.chunks[0].left -= k
		c -= k
		if p.chunks[0].left == 0 {
			p.chunks = p.chunks[1:]
		}
	}
	return p.decisionOf(p.tmpl, p.held, p.takenAt, now)
}

// decisionOf answers an admitted request from the take's policies: what
// Redis had left after it plus the units still held here, resets counted
// down from the take.
func (p *leasePool) decisionOf(tmpl []PolicyStatus, held int64, takenAt, now time.Time) *Decision {
	// A leased plan has a rate and a quota at most: one allocation for
	// the decision and its policies (this is the whole cost of a local
	// decision's answer).
	d := newDecision(len(tmpl))
	d.Allowed, d.Plan = true, p.pl.planName
	el := now.Sub(takenAt)
	for i, ps := range tmpl {
		ps.Remaining = min(ps.Remaining+held, max(ps.Limit, ps.Remaining))
		ps.Reset = max(ps.Reset-el, 0)
		d.Policies[i] = ps
	}
	return d
}

// detachLocked empties the pool and returns what it held.
func (p *leasePool) detachLocked() []leaseChunk {
	c := p.chunks
	p.chunks, p.held = nil, 0
	return c
}

// queue hands remainders to the sweeper.
func (ls *leases) queue(tenant string, cs []leaseChunk) {
	now := time.Now()
	ls.retMu.Lock()
	defer ls.retMu.Unlock()
	for _, c := range cs {
		if c.rsv != nil && c.rsv.h != "" && c.left > 0 {
			ls.returns = append(ls.returns, leaseReturn{tenant: tenant, leaseChunk: c, id: newID(), since: now})
		}
	}
}

// revoke drops every pool of tenant (its snapshot changed): their units go
// back, and the next decision takes under the new limits.
func (ls *leases) revoke(tenant string) {
	for _, p := range ls.all() {
		if p.key.tenant != tenant {
			continue
		}
		p.mu.Lock()
		p.dead = true
		ls.queue(tenant, p.detachLocked())
		p.mu.Unlock()
		ls.forget(p)
	}
	// The sweeper gives the units back within leaseSweepEvery, well inside
	// the second a revocation is promised in, without holding up the
	// subscription that called this.
}

func (ls *leases) sweepLoop() {
	defer close(ls.done)
	t := time.NewTicker(leaseSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-t.C:
			ls.sweep(time.Now())
			ls.giveBack(context.Background(), 4)
		}
	}
}

// sweep detaches the remainders of expired leases and forgets pools that
// have stayed unused past their lease (a snapshot replaced, a tenant gone).
func (ls *leases) sweep(now time.Time) {
	for _, p := range ls.all() {
		p.mu.Lock()
		forget := false
		if p.taking == nil && !now.Before(p.expires) {
			if p.held > 0 {
				ls.queue(p.key.tenant, p.detachLocked())
			} else if now.Sub(p.expires) > leaseIdle {
				p.dead, forget = true, true
			}
		}
		p.mu.Unlock()
		if forget {
			ls.forget(p)
		}
	}
}

// giveBack returns the queued remainders, leaseReturnBatch to a pipeline
// and up to workers pipelines at once. One that fails (Redis down) is
// queued again, under the same id; the sweeper retries it.
func (ls *leases) giveBack(ctx context.Context, workers int) {
	ls.retMu.Lock()
	rs := ls.returns
	ls.returns = nil
	ls.retMu.Unlock()
	if len(rs) == 0 {
		return
	}
	if ls.l.redisDown() {
		ls.requeue(rs)
		return
	}
	var wg sync.WaitGroup
	ch := make(chan []leaseReturn)
	for w := 0; w < min(workers, (len(rs)+leaseReturnBatch-1)/leaseReturnBatch); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range ch {
				if failed := ls.giveBackBatch(ctx, b); len(failed) > 0 {
					ls.requeue(failed)
				}
			}
		}()
	}
	for len(rs) > 0 {
		n := min(len(rs), leaseReturnBatch)
		ch <- rs[:n:n]
		rs = rs[n:]
	}
	close(ch)
	wg.Wait()
}

func (ls *leases) requeue(rs []leaseReturn) {
	now := time.Now()
	ls.retMu.Lock()
	defer ls.retMu.Unlock()
	for _, r := range rs {
		// Past the life of its mark, a return that may have been made
		// already is not retried: its units stay charged, as a crashed
		// holder's would, rather than be refunded twice.
		if now.Sub(r.since) < leaseReturnTTL-leaseCloseTimeout {
			ls.returns = append(ls.returns, r)
		}
	}
}

// leaseReturnScript gives a leased remainder back to the counter it was
// taken from, as Settle refunds a reservation (so the pending usage the
// worker flushes, q − f, goes down with it): once per return id, marked
// by KEYS[1] for ARGV[4] ms.
//
// KEYS: the return's mark, the state hash, the dirty set (one slot: the
// tenant's hash tag, or the slot's dirty set). ARGV: units, counter field,
// counter mark, the mark's life (ms). Reply: 1, or 0 for a return made
// already.
var leaseReturnScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[4]) then return 0 end
local h, q, n = KEYS[2], ARGV[2], -tonumber(ARGV[1])
if redis.call('HEXISTS', h, q) == 1 then
  redis.call('HINCRBY', h, q, n)
else
  redis.call('HINCRBY', h, 'g' .. string.sub(q, 2), n)
  if redis.call('PTTL', h) < 0 then redis.call('PEXPIRE', h, 3456000000) end
end
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('EXPIRE', KEYS[3], 3456000)
return 1
`)

// giveBackBatch makes the returns in one pipeline (split per node on a
// Cluster) and answers those that failed.
func (ls *leases) giveBackBatch(ctx context.Context, rs []leaseReturn) (failed []leaseReturn) {
	l := ls.l
	ttl := strconv.FormatInt(leaseReturnTTL.Milliseconds(), 10)
	cmds := make([]*redis.Cmd, len(rs))
	run := func(ctx context.Context, idx []int) error {
		_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				r := &rs[i]
				cmds[i] = leaseReturnScript.EvalSha(ctx, p,
					[]string{l.keys.leaseReturn(r.tenant, r.id), r.rsv.h, r.rsv.dirty},
					r.left, r.rsv.q, r.rsv.mark, ttl)
			}
			return nil
		})
		return err
	}
	all := make([]int, len(rs))
	for i := range all {
		all[i] = i
	}
	err := l.call(ctx, "lease return", func(ctx context.Context) error {
		err := run(ctx, all)
		var noScript []int
		for i, c := range cmds {
			if c != nil && c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT") {
				noScript = append(noScript, i)
			}
		}
		if len(noScript) == 0 {
			return err
		}
		// A Redis that restarted (or a Cluster node new to us) lacks the
		// script: load it and run those again (a return made twice is
		// refused by its mark).
		if err := leaseReturnScript.Load(ctx, l.rdb).Err(); err != nil {
			return err
		}
		return run(ctx, noScript)
	})
	if err != nil && abandoned(err) {
		return rs
	}
	for i, c := range cmds {
		if c == nil || c.Err() != nil {
			failed = append(failed, rs[i])
		}
	}
	return failed
}

// close stops taking, waits for the takes in flight and gives every unused
// unit back (bounded by leaseCloseTimeout): a fresh instance can then take
// all that is left.
func (ls *leases) close() {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	ls.closed = true
	ls.mu.Unlock()
	close(ls.stop)
	<-ls.done // the sweeper's own returns are over
	ls.takes.Wait()
	for _, p := range ls.all() {
		p.mu.Lock()
		p.dead = true
		ls.queue(p.key.tenant, p.detachLocked())
		p.mu.Unlock()
		ls.forget(p)
	}
	// A few rounds, a cooldown apart, so that one failed call (which starts
	// the cooldown) does not strand the rest; what still fails stays
	// charged, as a crashed holder's chunk would.
	ctx, cancel := context.WithTimeout(context.Background(), leaseCloseTimeout)
	defer cancel()
	for round := 0; round < 3 && ctx.Err() == nil; round++ {
		if round > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(ls.l.opts.Cooldown):
			}
		}
		ls.giveBack(ctx, 16)
		ls.retMu.Lock()
		left := len(ls.returns)
		ls.retMu.Unlock()
		if left == 0 {
			return
		}
	}
}
