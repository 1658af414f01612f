package limiter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file decides for a tenant missing from the near-cache in one round
// trip: the script reads the limits from the tenant's limits hash in Redis
// (refLua). The near-cache then saves work but is never needed for one
// trip, however many tenants are active.

// limitsTTL is how long a limits hash lives without being written again.
// The server deletes it whenever it writes or deletes the snapshot, and a
// hash older than Options.CacheTTL is re-read in the background (the same
// safety re-read as the near-cache's), so its TTL only bounds idle keys.
const limitsTTL = 24 * time.Hour

// limitsFields returns the limits hash of a snapshot (see refLua).
func limitsFields(p *prepared, at int64) []any {
	s := p.snap
	f := []any{"v", s.Version, "pl", s.Plan, "at", at}
	if r := p.rate; r != nil {
		f = append(f, "r", r.ei+" "+r.burst+" "+strconv.FormatFloat(r.rate.PerSecond, 'g', -1, 64))
	}
	if p.conc > 0 {
		f = append(f, "c", p.conc)
	}
	if len(p.windows) > 0 {
		f = append(f, "w", windowsField(p.windows))
	}
	for m, q := range p.quotas {
		f = append(f, "q:"+m, strings.Join([]string{q.limitS, boolArg(q.hard), q.endS, q.nextS,
			strconv.FormatInt(q.starts[0].Unix(), 10), strconv.FormatInt(q.starts[1].Unix(), 10), string(q.mode)}, " "))
		if p.rate != nil && len(p.windows) == 0 { // windows go the general way (refGeneral)
			f = append(f, "fq:"+m, fastRefField(p.rate, q))
		}
	}
	return f
}

// fastRefField is the limits hash's fq:<meter> of a plan with a rate and
// that quota: what fastRefBody decides from (see there).
func fastRefField(r *preparedRate, q *preparedQuota) string {
	hard := 0.0
	if q.hard {
		hard = 1
	}
	f := q.fields
	nums := [...]float64{r.eiF, float64(r.rate.Burst), float64(q.limit), hard, float64(q.endMs), float64(q.nextMs),
		float64(len(f[0])), float64(len(f[2]))}
	b := make([]byte, 0, 8*len(nums)+2*len(f[0])+2*len(f[2]))
	for _, v := range nums {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	for _, s := range f {
		b = append(b, s...)
	}
	return string(b)
}

// writeLimits stores the snapshot's limits hash for decisions by reference.
// A hash made from the snapshot stored in Redis is written only if that is
// still the stored version, and needs no safety re-read ("at" 0): the
// server deletes it with every write of the snapshot. One made from the
// Loader's answer (nothing in Redis tells of its changes) carries the time
// it was written, and is read again past Options.CacheTTL.
//
// A tenant with grants gets none: decisions by reference do not draw
// grants, so such a tenant is decided from its snapshot (two trips when it
// is not in the near-cache).
func (l *Limiter) writeLimits(ctx context.Context, p *prepared, fromRedis bool) {
	if len(p.grants) > 0 {
		return
	}
	at := time.Now().UnixMilli()
	if fromRedis {
		at = 0
	}
	args := append([]any{p.snap.Version, int64(limitsTTL / time.Second)}, limitsFields(p, at)...)
	_ = l.call(ctx, "limits", func(ctx context.Context) error {
		return putLimScript.Run(ctx, l.rdb, []string{l.keys.limits(p.snap.TenantID), l.keys.snapshot(p.snap.TenantID), p.state}, args...).Err()
	}) // best effort: without it the tenant is decided in two trips
}

// byRef decides a tenant that is not fresh in the near-cache in one trip.
// ok is false when Redis has no limits hash for it (then the caller reads
// the snapshot as before). Errors wrapping errRedisDown go to the fail modes.
func (l *Limiter) byRef(ctx context.Context, tenant string, req *Request) (d *Decision, ok bool, err error) {
	if d := l.cachedRefusalByRef(tenant, req); d != nil {
		return d, true, nil
	}
	var leaseID string
	if req.Concurrency && !req.Peek {
		leaseID = newID()
	}
	base, dirty := l.keys.tenantBase(tenant), l.keys.dirtyBase(tenant)
	seed := boolArg(l.opts.UsageLoader != nil)
	var confirm []any // a Loader's confirmation to write: version, at
	tv, _ := l.touches.Load(tenant)
	if tv != nil {
		t := tv.(touch)
		confirm = []any{t.version, t.at}
	}
	keys := []string{l.keys.limits(tenant)}
	var script *redis.Script
	var args []any
	var seedArg int // the index of ARGV's "seed required"
	if !req.Peek && !req.SkipQuota && !req.Concurrency && !l.opts.generalScript {
		// The common request: decided from the hash's fq:<meter> if it has
		// one, with the few arguments that needs (see fastRefBody).
		script, seedArg = fastRefScript, 2
		keys = append(keys, base+"st")
		args = append([]any{req.Cost, req.Meter, seed, dirty}, confirm...)
	} else {
		cost, peek := any(req.Cost), any("0")
		if req.Peek {
			cost, peek = int64(0), req.Cost
		}
		script, seedArg = refScript, 5
		args = append([]any{cost, peek, "1", base, leaseID, seed, req.Meter, dirty, boolArg(req.SkipQuota),
			boolArg(req.Concurrency), strconv.FormatInt(l.opts.LeaseTTL.Milliseconds(), 10)}, confirm...)
	}
	for attempt := 0; ; attempt++ {
		res, err := l.runScript(ctx, script, keys, args, nil)
		if err != nil {
			return nil, false, err
		}
		if len(res) == 1 {
			return nil, false, nil // no limits hash
		}
		// The hash's fields follow the decision: v, pl, r, c, q:<meter>,
		// at, and w after the general decision (fastCore's reply, whose
		// first element is negative, comes only from a hash without w).
		nf := 7
		if first, _ := toInt64(res[0]); first < 0 {
			nf = 6
		}
		if len(res) < 2+nf {
			return nil, false, fmt.Errorf("limiter: short script reply (%d elements)", len(res))
		}
		fields := res[len(res)-nf:]
		pl, version, at, err := l.refPlan(tenant, base, dirty, req, fields, false)
		if err != nil {
			return nil, false, err
		}
		res = res[:len(res)-nf]
		if leaseID != "" && !planHas(pl, 'c') {
			leaseID = ""
		}
		status, err := toInt64(res[0])
		if err != nil {
			return nil, false, err
		}
		if status == 2 {
			if attempt >= 2 {
				args[seedArg] = "0" // someone keeps deleting the counter: count from what Redis has
				continue
			}
			// the counter to rebuild is of the tenant's own period
			if pl, _, _, err = l.refPlan(tenant, base, dirty, req, fields, true); err != nil {
				return nil, false, err
			}
			meters, err := l.seed(ctx, pl, res)
			if err != nil {
				if errors.Is(err, errRedisDown) {
					return nil, false, err
				}
				d, err := l.unbuilt(pl, req)
				return d, true, err
			}
			if len(meters) > 0 {
				// Grants were rebuilt, which decisions by reference do not
				// draw: the caller decides from the snapshot.
				return nil, false, nil
			}
			continue
		}
		if tv != nil {
			l.touches.CompareAndDelete(tenant, tv) // written by the script
		}
		if len(pl.pol) == 0 {
			return &Decision{Allowed: true, Plan: pl.planName}, true, nil
		}
		var buf [4 + 3*4]int64
		ints, rest, err := replyNums(res, len(pl.pol), buf[:0])
		if err != nil {
			return nil, false, err
		}
		if len(rest) != 0 {
			return nil, false, fmt.Errorf("limiter: script reply has %d elements after its numbers", len(rest))
		}
		d, err := l.decision(pl, req, ints, leaseID)
		if err != nil {
			return nil, false, err
		}
		if h := l.opts.Hooks.OnCacheMiss; h != nil {
			h()
		}
		// A hash from the Loader past the safety TTL is read again off the
		// decision's path (the fill rewrites it).
		if !d.Allowed {
			l.cacheRefusal(pl, req, d)
		}
		l.noteQuotas(pl, d)
		if at.UnixMilli() != 0 && time.Since(at) > l.opts.CacheTTL {
			if _, touching := l.touches.Load(tenant); !touching {
				v := version
				l.recheckInBackground(tenant, v, func(same bool) {
					if same {
						l.touches.Store(tenant, touch{version: v, at: time.Now().UnixMilli()})
					} else {
						l.fillInBackground(tenant) // rewrites the limits hash
					}
				})
			}
		}
		return d, true, nil
	}
}

// refShapes bounds the shapes kept for decisions by reference: a few
// per plan and period length in use.
const refShapes = 1024

// shapeMap holds, by shapeKey, the policies of a decision by reference
// without a concurrency slot: the part of a limits hash that is the same
// for every tenant on one plan (the fields pl, r and q:<meter> less the
// period's dates), so that a decision parses and prepares it once, not
// every time. Tenants on one plan have periods of their own (each
// subscription's billing anchor), so a shape keeps only what a decision's
// answer reads of the period: its length (the quota's window). Its quota's
// counter fields and dates are another tenant's: the paths that use them
// (a reservation, a counter to rebuild) take the tenant's exact plan
// instead (refPlan's exact). It is a snapshot, replaced whole when a shape
// is added: decisions read it without a lock.
type shapeMap map[string][]policy

// refPlan returns the plan of a decision by reference from the limits
// hash's fields v, pl, r, c, q:<meter>, at (and w when the reply has it), with the hash's version and
// its "at". With exact (or a concurrency slot, whose key is the tenant's
// own) the plan is the tenant's own instead of a shared shape.
func (l *Limiter) refPlan(tenant, base, dirty string, req *Request, f []any, exact bool) (*plan, int64, time.Time, error) {
	str := func(v any) string { s, _ := v.(string); return s }
	if exact || req.Concurrency || req.Reserve {
		p, at, err := l.fromLimits(tenant, req.Meter, f)
		if err != nil {
			return nil, 0, time.Time{}, err
		}
		return l.snapshotPlan(p, req), p.snap.Version, at, nil
	}
	v, err := strconv.ParseInt(str(f[0]), 10, 64)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("limiter: limits hash of %q: bad version", tenant)
	}
	atMs, _ := strconv.ParseInt(str(f[5]), 10, 64) // 0: needs no safety re-read
	name := str(f[1])
	var kb [160]byte
	key, ok := shapeKey(kb[:0], name, str(f[2]), str(f[4]), req)
	if len(f) > 6 {
		if w := str(f[6]); w != "" {
			key = append(append(key, 0), w...) // the windows' policies
		}
	}
	var pol []policy
	if ok {
		if m := l.refShapes.Load(); m != nil {
			pol = (*m)[string(key)]
		}
	}
	if pol == nil {
		p, _, err := l.fromLimits(tenant, req.Meter, f)
		if err != nil {
			return nil, 0, time.Time{}, err
		}
		pol = l.snapshotPlan(p, req).pol
		if ok {
			l.putShape(string(key), pol)
		}
	}
	pl := &plan{tenant: tenant, planName: name, refKey: tenant, hash: base + "st", base: base,
		rfBase: l.keys.refusalBase(tenant), dirty: dirty, pol: pol}
	return pl, v, time.UnixMilli(atMs), nil
}

// putShape adds a shape, starting afresh past refShapes of them.
func (l *Limiter) putShape(key string, pol []policy) {
	l.refMu.Lock()
	defer l.refMu.Unlock()
	old := l.refShapes.Load()
	m := make(shapeMap, 8)
	if old != nil && len(*old) < refShapes {
		m = make(shapeMap, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	}
	m[key] = pol
	l.refShapes.Store(&m)
}

// shapeKey appends to b the key of the shape of a plan name, a limits
// hash's r and q:<meter> (see refLua) and the request's meter: q's limit,
// mode and the lengths of its two periods instead of their dates. ok is
// false for a q that does not parse (fromLimits reports it).
func shapeKey(b []byte, name, r, q string, req *Request) ([]byte, bool) {
	b = append(b, name...)
	b = append(b, 0)
	b = append(b, r...)
	b = append(b, 0)
	b = append(b, req.Meter...)
	b = append(b, 0)
	if req.SkipQuota {
		return append(b, 's'), true
	}
	if q == "" {
		return b, true
	}
	// q: <limit> <hard> <end ms> <next end ms> <start unix> <end unix> <mode>
	var t [7]string
	rest := q
	for i := range t {
		var found bool
		t[i], rest, found = strings.Cut(rest, " ")
		if found != (i < 6) {
			return nil, false
		}
	}
	next, e1 := strconv.ParseInt(t[3], 10, 64)
	s0, e2 := strconv.ParseInt(t[4], 10, 64)
	s1, e3 := strconv.ParseInt(t[5], 10, 64)
	if e1 != nil || e2 != nil || e3 != nil {
		return nil, false
	}
	b = append(b, t[0]...)
	b = append(b, ' ')
	b = append(b, t[1]...)
	b = append(b, ' ')
	b = append(b, t[6]...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s1-s0, 10)
	b = append(b, ' ')
	return strconv.AppendInt(b, next-s1*1000, 10), true // as fromLimits makes the windows
}

// cachedRefusalByRef is cachedRefusal for a tenant without a plan at hand:
// a cached refusal applies when the request checks its policy (the rate
// always, a quota of the request's meter, concurrency when a slot is asked).
func (l *Limiter) cachedRefusalByRef(tenant string, req *Request) *Decision {
	if l.opts.DisableRefusalCache || l.opts.Shadow || l.refusalN.Load() == 0 {
		return nil
	}
	l.refusalMu.Lock()
	list, ok := l.refusals.get(tenant)
	l.refusalMu.Unlock()
	if !ok {
		return nil
	}
	pl := &plan{tenant: tenant, refKey: tenant, rfBase: l.keys.refusalBase(tenant)}
	for _, r := range list {
		switch {
		case r.typ == 'r', r.typ == 'w', r.typ == 'f', // the rate and windows count every request
			r.typ == 'q' && !req.SkipQuota && r.policy == req.Meter,
			r.typ == 'c' && req.Concurrency:
			pl.pol = append(pl.pol, policy{typ: r.typ, name: r.policy})
		}
	}
	if len(pl.pol) == 0 {
		return nil
	}
	return l.cachedRefusal(pl, req)
}

func planHas(pl *plan, typ byte) bool {
	for _, p := range pl.pol {
		if p.typ == typ {
			return true
		}
	}
	return false
}

// fromLimits rebuilds the part of a snapshot that a decision on meter
// needs from the limits hash fields v, pl, r, c, q:<meter>, at.
func (l *Limiter) fromLimits(tenant, meter string, f []any) (*prepared, time.Time, error) {
	str := func(v any) string { s, _ := v.(string); return s }
	bad := func(what string) error { return fmt.Errorf("limiter: limits hash of %q: bad %s", tenant, what) }
	v, err := strconv.ParseInt(str(f[0]), 10, 64)
	if err != nil {
		return nil, time.Time{}, bad("version")
	}
	snap := Snapshot{TenantID: tenant, Plan: str(f[1]), Version: v}
	if r := str(f[2]); r != "" {
		t := strings.Fields(r)
		if len(t) != 3 {
			return nil, time.Time{}, bad("rate")
		}
		b, err1 := strconv.ParseInt(t[1], 10, 64)
		ps, err2 := strconv.ParseFloat(t[2], 64)
		if err1 != nil || err2 != nil {
			return nil, time.Time{}, bad("rate")
		}
		snap.Rate = &Rate{PerSecond: ps, Burst: b}
	}
	if c := str(f[3]); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return nil, time.Time{}, bad("concurrency")
		}
		snap.Concurrency = n
	}
	if q := str(f[4]); q != "" {
		t := strings.Fields(q)
		if len(t) != 7 {
			return nil, time.Time{}, bad("quota")
		}
		lim, e1 := strconv.ParseInt(t[0], 10, 64)
		next, e2 := strconv.ParseInt(t[3], 10, 64)
		s0, e3 := strconv.ParseInt(t[4], 10, 64)
		s1, e4 := strconv.ParseInt(t[5], 10, 64)
		if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
			return nil, time.Time{}, bad("quota")
		}
		snap.Quotas = map[string]Quota{meter: {Limit: lim, Mode: QuotaMode(t[6])}}
		snap.PeriodStart = time.Unix(s0, 0).UTC()
		snap.PeriodEnd = time.Unix(s1, 0).UTC()
		snap.NextPeriodEnd = time.UnixMilli(next).UTC()
	}
	if len(f) > 6 {
		ws, err := parseWindowsField(str(f[6]))
		if err != nil {
			return nil, time.Time{}, bad("windows")
		}
		snap.Windows = ws
	}
	at, _ := strconv.ParseInt(str(f[5]), 10, 64) // 0: needs no safety re-read
	return l.keys.prepare(snap), time.UnixMilli(at), nil
}

// touch is a limits hash's "at" to write, if the hash is still of version.
type touch struct {
	version, at int64
}

// recheckInBackground is the safety re-read of limits that came from
// Options.Loader: nothing in Redis tells of their changes, so the Loader is
// asked again, on a goroutine of its own (at most a few at once, one per
// tenant), and done says whether it still has the same version. A Loader
// error says nothing: the limits stay as they are and are re-checked on a
// later decision. No Redis trip is spent unless the version changed.
func (l *Limiter) recheckInBackground(tenant string, version int64, done func(same bool)) {
	if l.closed.Load() || l.opts.Loader == nil {
		return
	}
	select {
	case l.bgFills <- struct{}{}:
	default:
		return
	}
	l.wg.Add(1)
	go func() {
		defer func() { <-l.bgFills; l.wg.Done() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*l.opts.Timeout)
		defer cancel()
		v, err, _ := l.sf.Do("\x00recheck\x00"+tenant, func() (any, error) {
			s, err := l.opts.Loader(ctx, tenant)
			return s.Version, err
		})
		switch {
		case err == nil:
			done(v.(int64) == version)
		case errors.Is(err, ErrUnknownTenant):
			done(false)
		}
	}()
}

// fillInBackground reads the tenant's snapshot into the near-cache (and
// rewrites its limits hash) on a goroutine of its own, at most a few at
// once: a busy moment skips it rather than queue Redis work.
func (l *Limiter) fillInBackground(tenant string) {
	if l.closed.Load() {
		return
	}
	select {
	case l.bgFills <- struct{}{}:
	default:
		return
	}
	l.wg.Add(1)
	go func() {
		defer func() { <-l.bgFills; l.wg.Done() }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, _, _ = l.sf.Do(tenant, func() (any, error) { return l.fill(ctx, tenant) })
	}()
}
