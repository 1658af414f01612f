package limiter

import (
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
// tenant's limits: closed if the rate or quota fail mode is closed, else open.
func (l *Limiter) fallbackUnknown() (*Decision, error) {
	if l.opts.FailMode.Rate == FailClosed || l.opts.FailMode.Quota == FailClosed {
		l.onFallback("snapshot", FailClosed)
		return nil, ErrUnavailable
	}
	l.onFallback("snapshot", FailOpen)
	return &Decision{Allowed: true, Fallback: FallbackOpen}, nil
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
	d := &Decision{Allowed: true, Plan: pl.planName, Fallback: FallbackOpen, Policies: make([]PolicyStatus, len(pl.pol))}
	peek := req.Peek
	eff := req.Cost
	n := l.opts.ExpectedInstances
	now := time.Now()
	var st *localState
	var reservations []*rate.Reservation
	tookConc := false
	for i, p := range pl.pol {
		ps := PolicyStatus{Name: p.name, Limit: p.limit, Window: p.window, Remaining: p.limit, Mode: p.mode}
		if p.typ == 'q' {
			ps.Window = p.quota.windows[0]
		}
		if p.typ == 'c' {
			ps.Unit = UnitConcurrent
		}
		local := p.fail == FailLocal && p.typ != 'q'
		if !local {
			l.onFallback(p.name, FailOpen)
			d.Policies[i] = ps
			continue
		}
		l.onFallback(p.name, FailLocal)
		d.Fallback = FallbackLocal
		if st == nil {
			st = l.local.get(pl.refKey)
			st.mu.Lock()
		}
		refused := false
		var retry time.Duration
		switch p.typ {
		case 'r', 'w':
			perSecond, burst := p.rate.PerSecond, p.rate.Burst
			if p.typ == 'w' {
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
		}
		st.mu.Unlock()
		if d.Allowed && tookConc {
			d.lease = &lease{l: l, local: st}
		}
	}
	if d.RetryAfter > 0 && d.RetryAfter < time.Millisecond {
		d.RetryAfter = time.Millisecond
	}
	return d, nil
}
