package limiter

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// localStates holds the in-process buckets and concurrency counts of the
// local fail mode, bounded like the near-cache.
type localStates struct {
	mu  sync.Mutex
	lru *lru[string, *localState]
}

type localState struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	held    int64
	quotas  map[string]*quotaKnown
}

// quotaKnown is what the last decision Redis made said was left of a hard
// quota, so that the local fail mode holds a tenant to it: an exhausted
// tenant stays refused, and one with little left gets what is left divided
// by Options.ExpectedInstances (the other instances may spend the rest).
type quotaKnown struct {
	left  int64     // remaining after that decision
	until time.Time // end of its period
	used  int64     // admitted in process (fail mode) and not yet added to Redis
}

// localQuota reports whether a policy is a quota the local fail mode holds.
func localQuota(p *policy) bool {
	return p.typ == 'q' && p.fail == FailLocal && p.mode != ModeSoft
}

// noteQuotas records what a decision made by Redis says is left of the
// plan's local-mode hard quotas.
func (l *Limiter) noteQuotas(pl *plan, d *Decision) {
	var st *localState
	var now time.Time
	for i := range pl.pol {
		p := &pl.pol[i]
		if !localQuota(p) || i >= len(d.Policies) {
			continue
		}
		if st == nil {
			now = time.Now()
			st = l.local.get(pl.refKey)
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.quotas == nil {
				st.quotas = map[string]*quotaKnown{}
			}
		}
		ps := d.Policies[i]
		until := now.Add(ps.Reset)
		if ps.Reset <= 0 {
			until = now.Add(ps.Window)
		}
		// What this process admitted without Redis and has not yet added
		// to it stays pending: Redis's figure does not include it.
		if k := st.quotas[p.name]; k != nil && now.Before(k.until) {
			k.left, k.until = ps.Remaining, until
			continue
		}
		st.quotas[p.name] = &quotaKnown{left: ps.Remaining, until: until}
	}
}

func newLocalStates(size int) *localStates {
	return &localStates{lru: newLRU[string, *localState](size)}
}

func (s *localStates) get(key string) *localState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.lru.get(key)
	if !ok {
		st = &localState{buckets: map[string]*rate.Limiter{}}
		s.lru.put(key, st)
	}
	return st
}

func (st *localState) releaseConc() {
	st.mu.Lock()
	if st.held > 0 {
		st.held--
	}
	st.mu.Unlock()
}

// bucket returns the in-process bucket of a policy, adjusted to the current
// limits divided among the instances.
func (st *localState) bucket(name string, perSecond float64, burst int64, instances int) *rate.Limiter {
	r := rate.Limit(perSecond / float64(instances))
	b := int(math.Ceil(float64(burst) / float64(instances)))
	if b < 1 {
		b = 1
	}
	lim, ok := st.buckets[name]
	if !ok {
		lim = rate.NewLimiter(r, b)
		st.buckets[name] = lim
		return lim
	}
	if lim.Limit() != r {
		lim.SetLimit(r)
	}
	if lim.Burst() != b {
		lim.SetBurst(b)
	}
	return lim
}

func (l *Limiter) onFallback(policy string, mode FailMode) {
	if h := l.opts.Hooks.OnFallback; h != nil {
		h(policy, mode)
	}
}

// fallbackUnknown decides while Redis is down and nothing is known of the
// tenant's limits (the Loader failed too): closed if the rate or quota fail
// mode is closed; a request counting a meter in the local mode is refused
// too (it may be a hard quota, and nothing says what is left of it); else
// open.
func (l *Limiter) fallbackUnknown(req *Request) (*Decision, error) {
	if l.opts.FailMode.Rate == FailClosed || l.opts.FailMode.Quota == FailClosed ||
		(l.opts.FailMode.Quota == FailLocal && !req.SkipQuota && req.Limits == nil) {
		l.onFallback("snapshot", FailClosed)
		return nil, ErrUnavailable
	}
	l.onFallback("snapshot", FailOpen)
	return &Decision{Allowed: true, Fallback: FailOpen}, nil
}

// fallback decides without Redis, policy by policy by fail mode, all or
// nothing among the policies decided locally.
func (l *Limiter) fallback(pl *plan, req *Request) (*Decision, error) {
	for _, p := range pl.pol {
		if p.fail == FailClosed {
			l.onFallback(p.name, FailClosed)
			return nil, ErrUnavailable
		}
	}
	d := &Decision{Allowed: true, Plan: pl.planName, Fallback: FailOpen, Policies: make([]PolicyStatus, len(pl.pol))}
	peek := req.Peek
	eff := req.Cost
	n := l.instances()
	now := time.Now()
	var st *localState
	var reservations []*rate.Reservation
	tookConc := false
	var tookQuota []*quotaKnown
	for i, p := range pl.pol {
		ps := PolicyStatus{Name: p.name, Limit: p.limit, Window: p.window, Remaining: p.limit, Mode: p.mode}
		if p.typ == 'q' {
			ps.Window = p.quota.windows[0]
		}
		if p.typ == 'c' {
			ps.Unit = unitConcurrent
		}
		local := p.fail == FailLocal && (p.typ != 'q' || localQuota(&p))
		if !local {
			l.onFallback(p.name, FailOpen)
			d.Policies[i] = ps
			continue
		}
		l.onFallback(p.name, FailLocal)
		d.Fallback = FailLocal
		if st == nil {
			st = l.local.get(pl.refKey)
			st.mu.Lock()
		}
		refused := false
		var retry time.Duration
		switch p.typ {
		case 'r', 'w', 'f':
			// A window is held to a bucket of its limit refilled over its
			// length (divided among the instances, as the rate is).
			perSecond, burst := p.rate.PerSecond, p.rate.Burst
			if p.typ != 'r' {
				perSecond, burst = float64(p.limit)/p.window.Seconds(), p.limit
			}
			lim := st.bucket(p.name, perSecond, burst, n)
			res := lim.ReserveN(now, int(eff))
			switch {
			case !res.OK():
				refused = true
				retry = p.window
			case res.DelayFrom(now) > 0:
				refused = true
				retry = res.DelayFrom(now)
				res.CancelAt(now)
			case peek:
				res.CancelAt(now)
			default:
				reservations = append(reservations, res)
			}
			ps.Remaining = int64(math.Max(0, math.Floor(lim.TokensAt(now))))
			ps.Limit = int64(lim.Burst())
		case 'q':
			if st.quotas == nil {
				st.quotas = map[string]*quotaKnown{}
			}
			k := st.quotas[p.name]
			if k == nil || !now.Before(k.until) {
				// Nothing known of this period: as if all of it were left.
				k = &quotaKnown{left: p.limit, until: now.Add(ps.Window)}
				st.quotas[p.name] = k
			}
			budget := k.left / int64(n)
			if budget < 0 {
				budget = 0
			}
			ps.Limit = budget
			if k.used+eff > budget {
				refused, retry = true, k.until.Sub(now)
			} else if !peek {
				k.used += eff
				tookQuota = append(tookQuota, k)
			}
			ps.Remaining = max(0, budget-k.used)
			ps.Reset = k.until.Sub(now)
		case 'c':
			max := (p.limit + int64(n) - 1) / int64(n)
			ps.Limit = max
			if st.held+1 > max {
				refused, retry = true, time.Second
				ps.Remaining = 0
			} else {
				if !peek {
					st.held++
					tookConc = true
				}
				ps.Remaining = max - st.held
			}
		}
		if refused {
			ps.Reset = retry
			if d.Allowed || retry > d.RetryAfter {
				d.Policy, d.RetryAfter = p.name, retry
			}
			d.Allowed = false
		}
		d.Policies[i] = ps
	}
	if st != nil {
		if !d.Allowed {
			for _, r := range reservations {
				r.CancelAt(now)
			}
			if tookConc {
				st.held--
			}
			for _, k := range tookQuota {
				k.used -= eff
			}
		}
		st.mu.Unlock()
		if d.Allowed && tookConc {
			d.lease = &lease{l: l, local: st}
		}
	}
	if d.Allowed && !peek {
		l.countAdmitted(pl, eff, now)
	}
	if !d.Allowed && !peek {
		// Redis cannot count this refusal now: it is counted here and added
		// to Redis by the background flush once Redis answers again, like a
		// cached refusal (a peek is not a request, as in the script).
		l.countLocalRefusal(pl.rfBase, d.Policy, now)
	}
	if d.RetryAfter > 0 && d.RetryAfter < time.Millisecond {
		d.RetryAfter = time.Millisecond
	}
	return d, nil
}

// seedKnown fills in what is left of the plan's local-mode hard quotas of
// which this process knows nothing yet (no decision of Redis seen this
// period) from the durable usage, so that a tenant whose quota is used up
// stays refused through an outage. Without a UsageLoader, or when it
// fails, the fail mode holds the quota to its whole limit divided.
func (l *Limiter) seedKnown(ctx context.Context, pl *plan) {
	if l.opts.UsageLoader == nil {
		return
	}
	now := time.Now()
	for i := range pl.pol {
		p := &pl.pol[i]
		if !localQuota(p) {
			continue
		}
		st := l.local.get(pl.refKey)
		st.mu.Lock()
		k := st.quotas[p.name]
		st.mu.Unlock()
		if k != nil && now.Before(k.until) {
			continue
		}
		period := 0
		if !now.Before(p.quota.endsT[0]) {
			period = 1
		}
		q := p.quota
		v, err, _ := l.sf.Do("\x00usage:"+pl.tenant+"\x00"+q.meter, func() (any, error) {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.hardWait())
			defer cancel()
			return l.opts.UsageLoader(uctx, pl.tenant, q.meter, q.starts[period])
		})
		if err != nil {
			if h := l.opts.Hooks.OnLoaderError; h != nil {
				h("usage", err)
			}
			continue
		}
		st.mu.Lock()
		if k := st.quotas[p.name]; k == nil || !now.Before(k.until) {
			if st.quotas == nil {
				st.quotas = map[string]*quotaKnown{}
			}
			st.quotas[p.name] = &quotaKnown{left: max(0, q.limit-v.(int64)), until: q.endsT[period]}
		}
		st.mu.Unlock()
	}
}
