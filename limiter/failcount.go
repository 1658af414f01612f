package limiter

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// This file counts what the fail modes admit: every quota unit admitted
// without Redis is tallied here and added to the tenant's Redis counter
// (and so, by the worker's flush, to Postgres) once Redis answers, on the
// refusals' flush tick. It also reconciles a decision whose Redis answer
// came after the caller stopped waiting (see callLate).

// chargeScript adds n (negative: a refund) to a period counter, as
// settleScript does: to q when it exists, else to g, which the counter's
// rebuild adds; the counter's dirty mark sends it to Postgres.
//
// For a quota with grants (ARGV 5 the meter's grants field, 6 the
// included limit) the units a fail mode admitted are drawn as a decision
// would draw them, by Redis's clock now: what the included units left
// cannot cover comes from the active grants in order (then overage, never
// refused), so that units the fail mode gave out of the grants are not
// given again. A refund (a late Redis answer that took the units itself)
// goes to the counter only: the grants keep what they gave, which errs
// toward fewer units, never more. A counter missing (Redis lost the hash,
// and the grants are rebuilt from the ledger) draws nothing: those units
// count as included or overage usage.
//
// KEYS: state hash. ARGV: q field, n, mark, dirty set, the meter's grants
// field, included limit.
var chargeScript = redis.NewScript(grantsLua + `
local h = KEYS[1]
local used = redis.call('HGET', h, ARGV[1])
if used then
  redis.call('HINCRBY', h, ARGV[1], ARGV[2])
  local n = tonumber(ARGV[2])
  if n > 0 and ARGV[5] ~= '' then
    local G = redis.call('HGET', h, ARGV[5])
    if G then
      local free = tonumber(ARGV[6]) - tonumber(used)
      if free < 0 then free = 0 end
      local beyond = n - free
      if beyond > 0 then
        local t = redis.call('TIME')
        local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local av = grant_sum(G, now_ms)
        if beyond > av then beyond = av end
        if beyond > 0 then redis.call('HSET', h, ARGV[5], grant_take(G, now_ms, beyond)) end
      end
    end
  end
else
  redis.call('HINCRBY', h, 'g' .. string.sub(ARGV[1], 2), ARGV[2])
  if redis.call('PTTL', h) < 0 then redis.call('PEXPIRE', h, 3456000000) end
end
redis.call('SADD', ARGV[4], ARGV[3])
redis.call('EXPIRE', ARGV[4], 3456000)
return 1
`)

// chargeKey names one counter and, for a local-mode hard quota, the
// in-process state (refusal cache key, policy) whose pending count a
// flush settles.
type chargeKey struct {
	h, q, mark, dirty string
	ref, policy       string
	// g is the meter's grants field and lim the included limit the charge
	// draws grants beyond
	g   string
	lim int64
}

type chargeTally struct {
	mu sync.Mutex
	m  map[chargeKey]int64
}

func (t *chargeTally) add(k chargeKey, n int64) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[chargeKey]int64{}
	}
	t.m[k] += n
	t.mu.Unlock()
}

func (t *chargeTally) take() map[chargeKey]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.m
	t.m = nil
	return m
}

// chargeKeyOf is the counter a policy's units go to at now.
func (pl *plan) chargeKeyOf(p *policy, now time.Time) chargeKey {
	period := int64(0)
	if !now.Before(p.quota.endsT[0]) {
		period = 1
	}
	k := chargeKey{h: pl.hash, q: p.quota.fields[2*period], mark: pl.mark(p.quota, period), dirty: pl.dirty + "q"}
	if localQuota(p) {
		k.ref, k.policy = pl.refKey, p.name
	}
	// Whether the tenant has grants is Redis's to say (the near-cache may
	// have lost what it knew with the outage): the charge reads the field.
	k.g, k.lim = keyspace.GrantsOf(p.quota.meter), p.limit
	return k
}

// countAdmitted tallies the quota units of a request a fail mode admitted.
func (l *Limiter) countAdmitted(pl *plan, cost int64, now time.Time) {
	for i := range pl.pol {
		if p := &pl.pol[i]; p.typ == 'q' && cost > 0 {
			l.charges.add(pl.chargeKeyOf(p, now), cost)
		}
	}
}

// flushCharges adds the tallied units to Redis; what fails is kept for the
// next flush. A local-mode quota's pending count drops by what was added,
// and so does what it believes is left, until Redis says again.
func (l *Limiter) flushCharges(ctx context.Context) error {
	m := l.charges.take()
	if len(m) == 0 {
		return nil
	}
	keys := make([]chargeKey, 0, len(m))
	cmds := make([]*redis.Cmd, 0, len(m))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, n := range m {
			if n == 0 {
				continue
			}
			keys = append(keys, k)
			cmds = append(cmds, chargeScript.Eval(ctx, p, []string{k.h}, k.q, n, k.mark, k.dirty, k.g, k.lim))
		}
		return nil
	})
	for i, k := range keys {
		n := m[k]
		if cmds[i].Err() != nil {
			l.charges.add(k, n)
			continue
		}
		if k.ref != "" && n > 0 {
			st := l.local.get(k.ref)
			st.mu.Lock()
			if q := st.quotas[k.policy]; q != nil {
				q.used = max(0, q.used-n)
				q.left -= n
			}
			st.mu.Unlock()
		}
	}
	if err != nil {
		if h := l.opts.Hooks.OnRedisError; h != nil {
			h("charges", err)
		}
	}
	return err
}

// lateDecision is a decision whose Redis call was still running when the
// caller stopped waiting: once both its Redis answer and what the caller
// did instead (the fail modes' decision, or nothing) are known, the two
// are made to agree.
type lateDecision struct {
	l       *Limiter
	pl      *plan
	cost    int64
	peek    bool
	leaseID string

	mu      sync.Mutex
	haveRes bool
	res     []any
	resErr  error
	haveFb  bool
	fb      *Decision
	counted bool // in Limiter.late until reconciled
}

// answered is the call's outcome (on the call's goroutine).
func (ld *lateDecision) answered(res []any, err error) {
	ld.mu.Lock()
	ld.haveRes, ld.res, ld.resErr = true, res, err
	both := ld.haveFb
	ld.mu.Unlock()
	if both {
		ld.reconcile()
	}
}

// fellBack is what the caller answered instead: the fail modes' decision,
// or nil when it answered none (an error).
func (ld *lateDecision) fellBack(d *Decision) {
	ld.mu.Lock()
	ld.haveFb, ld.fb = true, d
	both := ld.haveRes
	ld.mu.Unlock()
	if both {
		ld.reconcile()
	}
}

// late marks the decision as one whose caller stopped waiting: its
// tenant's refusals wait for it (lateTakes) until it is reconciled.
func (ld *lateDecision) late() {
	ld.mu.Lock()
	ld.counted = true
	ld.mu.Unlock()
	ld.l.late.begin(ld.pl.tenant)
}

func (ld *lateDecision) reconcile() {
	ld.mu.Lock()
	counted := ld.counted
	ld.mu.Unlock()
	if counted {
		// After the refund below reached Redis (or failed to): a refusal
		// waiting for this late take then decides on the units given back.
		defer func() {
			ctx, cancel := context.WithTimeout(ld.l.ctx, ld.l.hardWait())
			_ = ld.l.flushCharges(ctx)
			cancel()
			ld.l.late.end(ld.pl.tenant)
		}()
	}
	if ld.resErr != nil || ld.peek {
		return // Redis did not answer: what the fail mode admitted stays counted
	}
	ints, _, err := replyNums(ld.res, len(ld.pl.pol), nil)
	if err != nil || len(ints) == 0 || ints[0] != 1 {
		return // refused (or a needs-seed reply: nothing taken)
	}
	l, pl := ld.l, ld.pl
	l.late.refunds.Add(1)
	fbAdmitted := ld.fb != nil && ld.fb.Allowed
	now := time.Now()
	for i := range pl.pol {
		p := &pl.pol[i]
		if p.typ != 'q' {
			continue
		}
		k := pl.chargeKeyOf(p, now)
		// Redis took the units: the fail mode's admission of them must not
		// be added again, and a request the caller did not admit is
		// refunded.
		if fbAdmitted && k.ref != "" {
			st := l.local.get(k.ref)
			st.mu.Lock()
			if q := st.quotas[k.policy]; q != nil {
				q.used = max(0, q.used-ld.cost)
			}
			st.mu.Unlock()
		}
		// Under the key the admission was tallied with: not yet flushed,
		// the two cancel out (and the flush leaves the pending count alone).
		l.charges.add(k, -ld.cost)
	}
	if ld.leaseID != "" {
		// The slot Redis gave is nobody's: the caller holds a local one, or none.
		for _, p := range pl.pol {
			if p.typ == 'c' {
				ctx, cancel := context.WithTimeout(l.ctx, l.hardWait())
				_ = l.rdb.ZRem(ctx, p.keys[0], ld.leaseID).Err()
				cancel()
			}
		}
	}
}
