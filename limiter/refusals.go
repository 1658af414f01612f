package limiter

import "time"

// cachedRefusal remembers a refusal until its retry time so that a tenant
// hammering past its limit costs no Redis work. It applies to later requests
// that check the same policy with at least the same cost.
type cachedRefusal struct {
	policy string
	typ    byte
	until  time.Time
	cost   int64
	d      Decision
}

// effCost is the cost a request asks about (validate made 0 into 1).
func effCost(req *Request) int64 { return req.Cost }

func (l *Limiter) cachedRefusal(pl *plan, req *Request) *Decision {
	if l.opts.DisableRefusalCache || l.opts.Shadow {
		return nil
	}
	if l.refusalN.Load() == 0 { // nobody refused: no lock on the decision path
		return nil
	}
	now := time.Now()
	l.refusalMu.Lock()
	list, ok := l.refusals.get(pl.refKey)
	l.refusalMu.Unlock()
	if !ok {
		return nil
	}
	eff := effCost(req)
	for _, r := range list {
		if !now.Before(r.until) || eff < r.cost {
			continue
		}
		for _, p := range pl.pol {
			if p.name != r.policy || p.typ != r.typ {
				continue
			}
			d := r.d
			d.Policies = append([]PolicyStatus(nil), r.d.Policies...)
			d.RetryAfter = r.until.Sub(now).Round(time.Millisecond)
			if d.RetryAfter < time.Millisecond {
				d.RetryAfter = time.Millisecond
			}
			for i := range d.Policies {
				if d.Policies[i].Name == r.policy {
					d.Policies[i].Reset = d.RetryAfter
				}
			}
			if !req.Peek {
				// a peek asks and takes nothing: no request was refused (as
				// in the script, which counts no refused peek)
				l.countLocalRefusal(pl.rfBase, r.policy, now)
			}
			if h := l.opts.Hooks.OnRefusalCacheHit; h != nil {
				h(r.policy)
			}
			return &d
		}
	}
	return nil
}

func (l *Limiter) cacheRefusal(pl *plan, req *Request, d *Decision) {
	if l.opts.DisableRefusalCache || l.opts.Shadow || d.RetryAfter <= 0 {
		return
	}
	var typ byte
	for _, p := range pl.pol {
		if p.name == d.Policy {
			typ = p.typ
		}
	}
	if typ == 'c' || typ == 0 { // slots free at any moment: never cached
		return
	}
	now := time.Now()
	r := cachedRefusal{policy: d.Policy, typ: typ, until: now.Add(d.RetryAfter), cost: effCost(req), d: *d}
	r.d.lease = nil
	l.refusalMu.Lock()
	defer l.refusalMu.Unlock()
	old, _ := l.refusals.get(pl.refKey)
	list := make([]cachedRefusal, 0, len(old)+1)
	for _, o := range old {
		if now.Before(o.until) && !(o.policy == r.policy && o.typ == r.typ) {
			list = append(list, o)
		}
	}
	l.refusals.put(pl.refKey, append(list, r))
	l.refusalN.Store(int64(l.refusals.len()))
}

// dropRefusals forgets a tenant's cached refusals (its limits changed).
func (l *Limiter) dropRefusals(tenant string) {
	l.refusalMu.Lock()
	defer l.refusalMu.Unlock()
	defer func() { l.refusalN.Store(int64(l.refusals.len())) }()
	if tenant == "" {
		l.refusals.clear()
		return
	}
	l.refusals.remove(tenant)
}
