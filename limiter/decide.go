package limiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// This file runs the decision script, rebuilds missing quota counters and
// reads the script's reply into a Decision.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// decide runs the decision script, rebuilding missing quota counters first
// when a UsageLoader is configured. With due (a cached snapshot past the
// safety TTL), the script also returns the stored snapshot, which confirms
// or drops the cached one: the safety re-read costs no round trip.
func (l *Limiter) decide(ctx context.Context, pl *plan, req *Request, due *prepared) (*Decision, error) {
	peek := req.Peek
	var leaseID string
	for _, p := range pl.pol {
		if p.typ == 'c' && !peek {
			leaseID = newID()
		}
	}
	keys := pl.keys
	if due != nil {
		keys = append(keys[:len(keys):len(keys)], due.entKey) // a copy: pl.keys is shared
	}
	script, args := l.decideArgs(pl, req, due != nil, leaseID, l.opts.UsageLoader != nil)
	for attempt := 0; ; attempt++ {
		ld := &lateDecision{l: l, pl: pl, cost: req.Cost, peek: req.Peek, leaseID: leaseID}
		res, err := l.runScript(ctx, script, keys, args, ld)
		if err != nil {
			return nil, err
		}
		if len(res) < 2 {
			return nil, fmt.Errorf("limiter: short script reply (%d elements)", len(res))
		}
		status, err := toInt64(res[0])
		if err != nil {
			return nil, err
		}
		if status == 5 {
			// The snapshot's window has not begun by Redis's clock.
			if e := l.earlier(pl, req); e != nil && attempt < 3 {
				pl = e
				keys = pl.keys
				if due != nil {
					keys = append(keys[:len(keys):len(keys)], due.entKey)
				}
				script, args = l.decideArgs(pl, req, due != nil, leaseID, l.opts.UsageLoader != nil)
				continue
			}
			return nil, fmt.Errorf("limiter: the snapshot's window of %q has not begun by Redis's clock", pl.tenant)
		}
		if status == 4 {
			if attempt >= 3 {
				// others keep raising the floor past what Redis holds
				// (refunds racing): decide on what Redis has
				for _, f := range pl.floor {
					if f != nil {
						f.Store(0)
					}
				}
			}
			if err := l.rebase(ctx, pl, res); err != nil {
				if errors.Is(err, errRedisDown) {
					return nil, err
				}
				return l.unbuilt(pl, req)
			}
			script, args = l.decideArgs(pl, req, due != nil, leaseID, l.opts.UsageLoader != nil)
			continue
		}
		if status != 2 {
			var buf [4 + 3*4]int64 // a decision has at most 4 policies in common use
			ints, rest, err := replyNums(res, len(pl.pol), buf[:0])
			if err != nil {
				return nil, err
			}
			want := 0 // what follows the numbers: the stored snapshot, when due, and the draws
			if due != nil {
				want = 1
			}
			drawn := req.Reserve && !req.Peek && pl.grants
			if drawn {
				want++
			}
			if len(rest) != want {
				return nil, fmt.Errorf("limiter: script reply has %d elements after its numbers, want %d", len(rest), want)
			}
			if due != nil {
				raw, _ := rest[0].(string)
				same := raw != "" && storedVersion(raw) == due.snap.Version
				if raw == "" && due.fromLoader {
					// Still not in Redis: the Loader alone can confirm it,
					// off the decision's path and without a Redis trip.
					l.recheckInBackground(pl.tenant, due.snap.Version, func(same bool) {
						l.cache.refreshed(pl.tenant, due, same, time.Now())
					})
				} else {
					l.cache.refreshed(pl.tenant, due, same, time.Now())
				}
				if !same && raw != "" {
					// The stored snapshot changed without the server's write
					// (which deletes it): the limits hash is as old as our
					// copy. (Without a stored snapshot the hash came from the
					// Loader and is re-read by its age.)
					_ = l.call(ctx, "limits", func(ctx context.Context) error {
						return l.rdb.Del(ctx, l.keys.limits(pl.tenant)).Err()
					})
				}
			}
			d, err := l.decision(pl, req, ints, leaseID)
			if err == nil && drawn && d.rsv != nil {
				d.rsv.drawn, _ = rest[len(rest)-1].(string)
			}
			if err == nil && pl.fast != nil && !req.Peek {
				if q := pl.pol[1]; q.quota.hard {
					pl.raiseFloor(ints[9], q.limit-ints[7])
				}
			}
			return d, err
		}
		if attempt >= 2 {
			// someone keeps deleting the counter: count from what Redis has
			script, args = l.decideArgs(pl, req, due != nil, leaseID, false)
			continue
		}
		meters, err := l.seed(ctx, pl, res)
		if err != nil {
			if errors.Is(err, errRedisDown) || errors.Is(err, ErrOverloaded) {
				return nil, err // not the UsageLoader's failure
			}
			return l.unbuilt(pl, req)
		}
		if np := l.withGrants(pl, req, meters); np != nil {
			pl = np
			keys = pl.keys
			if due != nil {
				keys = append(keys[:len(keys):len(keys)], due.entKey)
			}
			script, args = l.decideArgs(pl, req, due != nil, leaseID, l.opts.UsageLoader != nil)
		}
	}
}

// decideArgs returns the script and ARGV of a decision: fastBody's for
// the common plan when the plan's prepared form fits (seed as the limiter
// has it, refusals counted, no peek), decideBody's otherwise. With readBack
// the script also returns the stored snapshot (the last KEY).
func (l *Limiter) decideArgs(pl *plan, req *Request, readBack bool, leaseID string, seed bool) (*redis.Script, []any) {
	// A reservation of a tenant with grants goes the general way, whose
	// reply says what it drew from each grant (for the settle's refund).
	drawn := req.Reserve && !req.Peek && pl.grants
	if pl.fast != nil && !req.Peek && !req.leaseTake && !drawn && seed == (l.opts.UsageLoader != nil) && !l.opts.generalScript {
		n := 1 + len(pl.fast)
		if readBack {
			n++
		}
		args := make([]any, n)
		args[0] = req.Cost
		copy(args[1:], pl.fast)
		args[1] = pl.fastArg()
		if readBack {
			args[n-1] = "1"
		}
		if pl.grants {
			return fastGrantsScript, args
		}
		return fastScript, args
	}
	n := 3 + len(pl.args)
	if readBack || drawn {
		n++
	}
	if drawn {
		n++
	}
	args := make([]any, n)
	// A peek takes nothing (cost 0 to the script) and asks about req.Cost.
	args[0] = req.Cost
	args[1] = "0"
	if req.Peek {
		args[0], args[1] = int64(0), req.Cost
	}
	args[2] = boolArg(!req.leaseTake) // a refused lease take is not a refused request
	copy(args[3:], pl.args)
	if readBack || drawn {
		// one more ARGV: read the snapshot (the last KEY) back, or not
		args[3+len(pl.args)] = boolArg(readBack)
	}
	if drawn {
		args[n-1] = "1" // and one more: report the grants drawn
	}
	if leaseID != "" {
		args[4] = leaseID
	}
	args[5] = boolArg(seed)
	return decideScript, args
}

// unbuilt decides when a quota counter is missing and cannot be rebuilt
// (the UsageLoader failed): never by counting from zero, which would give
// the tenant its quota again. The fail modes decide, as in an outage,
// without a write to Redis, so the next decision tries the rebuild again.
func (l *Limiter) unbuilt(pl *plan, req *Request) (*Decision, error) {
	return l.fallback(pl, req)
}

// runScript runs one decision's script. With ld, a call the caller stops
// waiting for is reconciled when its answer comes (an error wrapping
// *lateError carries ld to the caller, who says what it did instead).
func (l *Limiter) runScript(ctx context.Context, script *redis.Script, keys []string, args []any, ld *lateDecision) ([]any, error) {
	if l.batch != nil {
		return l.batch.do(ctx, script, keys, args)
	}
	var res []any
	var late func(error)
	if ld != nil {
		late = func(err error) { ld.answered(res, err) }
	}
	err := l.callLate(ctx, "decide", func(ctx context.Context) error {
		var err error
		res, err = script.Run(ctx, l.rdb, keys, args...).Slice()
		return err
	}, late)
	if err != nil {
		// res is not read: a call abandoned at its deadline may still be
		// writing it (late reads it once it is done).
		if ld != nil && (errors.Is(err, errGaveUp) || errors.Is(err, errGaveUpCtx)) {
			ld.late()
			return nil, &lateError{err: err, ld: ld}
		}
		return nil, err
	}
	return res, nil
}

// lateError is a decision whose call outlived the caller's wait.
type lateError struct {
	err error
	ld  *lateDecision
}

func (e *lateError) Error() string { return e.err.Error() }
func (e *lateError) Unwrap() error { return e.err }

// fellBack tells a late decision (if err carries one) what the caller
// answered instead: d, or nothing.
func fellBack(err error, d *Decision) {
	var le *lateError
	if errors.As(err, &le) {
		le.ld.fellBack(d)
	}
}

// seed rebuilds the missing counters a needs-seed reply names, each from
// the UsageLoader's durable figure (see seedLua). A seed refused because
// a flush acknowledgement moved the epoch meanwhile is simply not done:
// the caller's next attempt sees the counter still missing and reads
// Postgres again.
//
// It returns the meters the GrantLoader gave grants of (nil without any):
// a plan made while Redis held none of them (it had lost them) is made
// again with them (withGrants), or the decision after would not draw them.
func (l *Limiter) seed(ctx context.Context, pl *plan, res []any) (map[string]bool, error) {
	n, err := toInt64(res[1])
	if err != nil || int(n)*2+3 > len(res) {
		return nil, fmt.Errorf("limiter: malformed seed reply")
	}
	epoch, err := toInt64(res[2])
	if err != nil {
		return nil, fmt.Errorf("limiter: malformed seed reply")
	}
	var meters map[string]bool
	if l.opts.GrantLoader != nil {
		// A counter is missing: so may the grants be (Redis lost the
		// hash). They are rebuilt under the same epoch, before the
		// counter, so that the decision after draws what the ledger has.
		if meters, err = l.rebuildGrants(ctx, pl.tenant, epoch); err != nil {
			return nil, err
		}
	}
	for i := 0; i < int(n); i++ {
		idx, err1 := toInt64(res[3+2*i])
		period, err2 := toInt64(res[4+2*i])
		if err1 != nil || err2 != nil || idx < 1 || int(idx) > len(pl.pol) || period < 0 || period > 1 || pl.pol[idx-1].quota == nil {
			return nil, fmt.Errorf("limiter: malformed seed reply")
		}
		q := pl.pol[idx-1].quota
		durable, err := l.opts.UsageLoader(ctx, pl.tenant, q.meter, q.starts[period])
		if err != nil {
			if h := l.opts.Hooks.OnRedisError; h != nil {
				h("usage", err)
			}
			return nil, fmt.Errorf("limiter: usage of %q %s: %w", pl.tenant, q.meter, err)
		}
		expireAt := q.endsT[period].Add(7 * 24 * time.Hour).UnixMilli()
		if err := l.call(ctx, "seed", func(ctx context.Context) error {
			return seedScript.Run(ctx, l.rdb, []string{pl.hash}, q.sfx[period], durable, expireAt, epoch, pl.mark(q, period), pl.dirty+"q").Err()
		}); err != nil {
			return nil, err
		}
	}
	return meters, nil
}

// rebuildGrants writes the tenant's grants as the GrantLoader reads them
// (keyspace.Keys.PutGrantsAt) unless the state hash's epoch moved from
// epoch, which the seed reply carried from before this read: then the
// counter's seed is refused too and the caller's next attempt reads both
// again. Grants Redis has keep Redis's remaining.
func (l *Limiter) rebuildGrants(ctx context.Context, tenant string, epoch int64) (map[string]bool, error) {
	grants, err := l.opts.GrantLoader(ctx, tenant)
	if err != nil {
		if h := l.opts.Hooks.OnLoaderError; h != nil {
			h("grants", err)
		}
		return nil, fmt.Errorf("limiter: grants of %q: %w", tenant, err)
	}
	var meters map[string]bool
	for _, g := range grants {
		if meters == nil {
			meters = map[string]bool{}
		}
		meters[g.Meter] = true
	}
	return meters, l.call(ctx, "grants", func(ctx context.Context) error {
		_, err := l.keys.ks.PutGrantsAt(ctx, l.rdb, tenant, epoch, grants)
		return err
	})
}

// withGrants is pl made again from its snapshot with the grants of meters
// (a seed's rebuild), when pl was made without some of them; nil when
// nothing changes. The near-cache keeps the new form, so that the
// tenant's next decisions draw the grants too.
func (l *Limiter) withGrants(pl *plan, req *Request, meters map[string]bool) *plan {
	p := pl.src
	if p == nil || len(meters) == 0 {
		return nil
	}
	missing := false
	for m := range meters {
		if !p.grants[m] {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	all := maps.Clone(meters)
	for m := range p.grants {
		all[m] = true
	}
	np := l.keys.prepareWith(p.snap, all)
	np.floors, np.fromLoader = p.floors, p.fromLoader
	l.cache.replace(p.snap.TenantID, p, np)
	return l.snapshotPlan(np, req)
}

// rebase checks a counter the fast script found below its floor against
// Postgres (see rebaseLua), then forgets the floor, which the next
// decision sets again from what Redis holds now.
func (l *Limiter) rebase(ctx context.Context, pl *plan, res []any) error {
	period, err := toInt64(res[1])
	if err != nil || period < 0 || period > 1 || pl.fast == nil {
		return fmt.Errorf("limiter: malformed rebase reply")
	}
	q := pl.pol[1].quota
	if pl.floor[period] == nil {
		return nil
	}
	floor := pl.floor[period].Load()
	if l.opts.UsageLoader != nil {
		durable, err := l.opts.UsageLoader(ctx, pl.tenant, q.meter, q.starts[period])
		if err != nil {
			if h := l.opts.Hooks.OnRedisError; h != nil {
				h("usage", err)
			}
			return fmt.Errorf("limiter: usage of %q %s: %w", pl.tenant, q.meter, err)
		}
		if err := l.call(ctx, "rebase", func(ctx context.Context) error {
			return rebaseScript.Run(ctx, l.rdb, []string{pl.hash}, q.sfx[period], durable, floor).Err()
		}); err != nil {
			return err
		}
	}
	pl.floor[period].CompareAndSwap(floor, 0)
	return nil
}

// replyNums reads the numbers of a decision script's reply for npol
// policies into buf, as decideLua's reply has them (status, refusing
// index, retry ms, Redis time ms, then remaining, reset ms and period per
// policy), from that reply or from fastCore's shorter one (negative first
// element; it has no Redis time, which only a concurrency slot needs and
// the fast scripts never take), and returns what follows the numbers.
func replyNums(res []any, npol int, buf []int64) ([]int64, []any, error) {
	if len(res) == 0 {
		return nil, nil, fmt.Errorf("limiter: empty script reply")
	}
	first, err := toInt64(res[0])
	if err != nil {
		return nil, nil, err
	}
	if first < 0 {
		if npol != 2 || len(res) < 6 {
			return nil, nil, fmt.Errorf("limiter: fast script reply of %d elements for %d policies", len(res), npol)
		}
		var v [5]int64
		for i := range v {
			if v[i], err = toInt64(res[1+i]); err != nil {
				return nil, nil, err
			}
		}
		e := -first - 1
		// status, index, retry, time; rate: remaining, reset, period 0;
		// quota: remaining, reset, period
		buf = append(buf[:0], e&1, (e>>1)&3, v[0], 0, v[1], v[2], 0, v[3], v[4], e>>3)
		return buf, res[6:], nil
	}
	n := 4 + 3*npol
	if len(res) < n {
		return nil, nil, fmt.Errorf("limiter: script reply has %d elements, want %d", len(res), n)
	}
	buf = buf[:0]
	for _, v := range res[:n] {
		x, err := toInt64(v)
		if err != nil {
			return nil, nil, err
		}
		buf = append(buf, x)
	}
	return buf, res[n:], nil
}

// decisionPair holds a decision and its policies together.
type decisionPair struct {
	d  Decision
	ps [2]PolicyStatus
}

// newDecision returns a Decision with n policies, in one allocation for
// the common plan's two (a rate and a quota).
func newDecision(n int) *Decision {
	if n <= 2 {
		x := &decisionPair{}
		x.d.Policies = x.ps[:n:n]
		return &x.d
	}
	return &Decision{Policies: make([]PolicyStatus, n)}
}

// decision makes a Decision of a reply's numbers (replyNums).
func (l *Limiter) decision(pl *plan, req *Request, ints []int64, leaseID string) (*Decision, error) {
	if len(ints) != 4+3*len(pl.pol) {
		return nil, fmt.Errorf("limiter: script reply has %d numbers, want %d", len(ints), 4+3*len(pl.pol))
	}
	d := newDecision(len(pl.pol))
	d.Allowed, d.Plan = ints[0] == 1, pl.planName
	for i, p := range pl.pol {
		o := 4 + 3*i
		ps := PolicyStatus{Name: p.name, Limit: p.limit, Window: p.window, Remaining: ints[o], Reset: time.Duration(ints[o+1]) * time.Millisecond, Mode: p.mode}
		switch p.typ {
		case 'q':
			period := ints[o+2] & 1
			ps.Window = p.quota.windows[period]
			if req.Reserve && !req.Peek && ints[0] == 1 {
				d.rsv = &rsvTarget{h: pl.hash, q: p.quota.fields[2*period], mark: pl.mark(p.quota, period), dirty: pl.dirty + "q"}
				if p.quota.grants {
					d.rsv.g = keyspace.GrantsOf(p.quota.meter)
				}
			}
		case 'c':
			ps.Unit = unitConcurrent
		}
		d.Policies[i] = ps
	}
	if !d.Allowed {
		idx := ints[1]
		if idx < 1 || int(idx) > len(pl.pol) {
			return nil, fmt.Errorf("limiter: script named policy %d of %d", idx, len(pl.pol))
		}
		d.Policy = pl.pol[idx-1].name
		d.RetryAfter = time.Duration(ints[2]) * time.Millisecond
		if r := d.Policies[idx-1].Reset; d.RetryAfter < r {
			d.RetryAfter = r
		}
	} else if leaseID != "" {
		for _, p := range pl.pol {
			if p.typ == 'c' {
				// ints[3] is the script's Redis time, the clock the
				// lease's expiry score was taken from.
				exp := time.UnixMilli(ints[3]).Add(l.opts.LeaseTTL)
				d.lease = &lease{l: l, key: p.keys[0], id: leaseID, expires: exp}
			}
		}
	}
	return d, nil
}
