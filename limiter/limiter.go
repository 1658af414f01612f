package limiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// Limiter decides requests against tenants' plan limits (or explicit
// limits) in one Redis round trip. It is safe for concurrent use.
type Limiter struct {
	rdb         redis.UniversalClient
	opts        Options
	keys        Keys
	cache       *snapCache
	sf          singleflight.Group
	ctxTimeouts bool

	inFlight  atomic.Int64
	downUntil atomic.Int64 // unix nanoseconds; Redis is skipped before it
	closed    atomic.Bool

	refusalMu sync.Mutex
	refusals  *lru[string, []cachedRefusal]
	refusalN  atomic.Int64 // entries in refusals, read without the lock
	tally     refusalTally // cached refusals not yet added to Redis

	local *localStates
	batch *batcher

	pubsub *redis.PubSub
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Limiter on rdb (a single node, Ring or Cluster client). It
// subscribes to the snapshot invalidation channel at once; Close stops it.
//
// For Timeout to bound every call even when Redis hangs, the cheapest is a
// client built with ContextTimeoutEnabled; otherwise each Redis call runs
// on its own goroutine so that it can be abandoned at the deadline.
func New(rdb redis.UniversalClient, opts Options) (*Limiter, error) {
	if rdb == nil {
		return nil, errors.New("limiter: New needs a Redis client")
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	l := &Limiter{
		rdb:      rdb,
		opts:     opts,
		keys:     Keys{Prefix: opts.Prefix},
		cache:    newSnapCache(opts.CacheSize, opts.CacheTTL),
		refusals: newLRU[string, []cachedRefusal](opts.CacheSize),
		local:    newLocalStates(opts.CacheSize),
	}
	switch c := rdb.(type) {
	case *redis.Client:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	if opts.Batching > 0 {
		l.batch = newBatcher(ctx, l, opts.MaxBatch)
	}
	l.pubsub = rdb.Subscribe(ctx, l.keys.Invalidations())
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.flushRefusalsLoop(ctx) }()
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.subscribe(ctx) }()
	return l, nil
}

// Close stops the invalidation subscription (and the batcher). It does not
// close the Redis client, which belongs to the caller.
func (l *Limiter) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.cancel()
	err := l.pubsub.Close() // unblocks the subscription's read
	l.wg.Wait()
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("limiter: closing subscription: %w", err)
	}
	return nil
}

// Keys returns the key names the Limiter uses.
func (l *Limiter) Keys() Keys { return l.keys }

// Allow decides one request of tenant. A refusal is a Decision with Allowed
// false. Errors: ErrInvalidRequest (wrapped) for bad arguments,
// ErrUnknownTenant, ErrUnavailable (Redis failed and a policy's fail mode is
// closed), ErrOverloaded (Options.MaxInFlight), ErrClosed, or the context's
// error.
func (l *Limiter) Allow(ctx context.Context, tenant string, req Request) (*Decision, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := l.validate(tenant, &req); err != nil {
		return nil, err
	}
	if max := l.opts.MaxInFlight; max > 0 {
		if l.inFlight.Add(1) > int64(max) {
			l.inFlight.Add(-1)
			return nil, ErrOverloaded
		}
		defer l.inFlight.Add(-1)
	}
	d, err := l.allow(ctx, tenant, &req)
	if err != nil {
		return nil, err
	}
	if d.Shadow || (!d.Allowed && l.opts.Shadow) {
		d.Allowed, d.Shadow = true, true
	}
	if h := l.opts.Hooks.OnDecision; h != nil {
		h(tenant, d)
	}
	return d, nil
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, a...)...)
}

// validName accepts printable ASCII without spaces, braces (they would break
// the hash tag) or colons (key separators).
func validName(s string, colon bool) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '{' || c == '}' || (!colon && c == ':') {
			return false
		}
	}
	return true
}

func (l *Limiter) validate(tenant string, req *Request) error {
	if !validName(tenant, true) {
		return invalid("tenant %q: want 1-256 printable ASCII characters without spaces or braces", tenant)
	}
	if req.Cost < 0 {
		return invalid("cost %d is negative", req.Cost)
	}
	if req.Cost > l.opts.MaxCost {
		return invalid("cost %d is over the maximum %d", req.Cost, l.opts.MaxCost)
	}
	if req.Meter == "" {
		req.Meter = DefaultMeter
	} else if !validName(req.Meter, false) {
		return invalid("meter %q: want 1-256 printable ASCII characters without spaces, braces or colons", req.Meter)
	}
	if x := req.Limits; x != nil {
		if x.Rate != nil && (x.Rate.PerSecond <= 0 || x.Rate.Burst < 1) {
			return invalid("explicit rate %+v: want per_second > 0 and burst >= 1", *x.Rate)
		}
		if x.Concurrency < 0 {
			return invalid("explicit concurrency %d is negative", x.Concurrency)
		}
		for _, w := range x.Windows {
			if !validName(w.Name, false) {
				return invalid("window name %q: want printable ASCII without spaces, braces or colons", w.Name)
			}
			if w.Limit < 0 || w.Length < time.Millisecond {
				return invalid("window %q: want limit >= 0 and length >= 1ms", w.Name)
			}
		}
	}
	return nil
}

// policy is one policy of a decision, in header order.
type policy struct {
	typ    byte // 'r', 'w', 'q', 'c'
	name   string
	limit  int64
	window time.Duration
	mode   string
	quota  *preparedQuota
	rate   Rate
	a, b   string
	c, d   string
	keys   []string
	fail   FailMode
}

// plan is what one decision checks.
type plan struct {
	tenant   string
	planName string
	refKey   string // refusal cache key
	rfBase   string
	pol      []policy
	nkeys    int
	explicit bool

	// Ready to send (read-only once built, shared by concurrent decisions):
	// the script's KEYS, ARGV from the 4th on with the per-policy
	// arguments, boxed once.
	keys []string
	args []any
}

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
	pl := &plan{tenant: p.snap.TenantID, planName: p.snap.Plan, refKey: p.snap.TenantID, rfBase: p.rfBase}
	pl.pol = make([]policy, 0, 3)
	if r := p.rate; r != nil {
		pl.add(policy{typ: 'r', name: PolicyRate, limit: r.rate.Burst, window: r.window, rate: r.rate, a: r.ei, b: r.burst, keys: []string{r.key}, fail: l.opts.FailMode.Rate})
	}
	if k.meter != "" {
		q := p.quotas[k.meter]
		pl.add(policy{typ: 'q', name: q.meter, limit: q.limit, mode: q.mode, quota: q, a: q.limitS, b: boolArg(q.hard), c: q.endS, d: q.nextS, keys: q.keys[:], fail: l.opts.FailMode.Quota})
	}
	if k.concurrent {
		pl.add(policy{typ: 'c', name: PolicyConcurrency, limit: p.conc, a: strconv.FormatInt(p.conc, 10), b: strconv.FormatInt(l.opts.LeaseTTL.Milliseconds(), 10), keys: []string{p.concKey}, fail: l.opts.FailMode.Concurrency})
	}
	pl.finish()
	v, _ := p.plans.LoadOrStore(k, pl)
	return v.(*plan)
}

// finish builds the script's keys and fixed arguments.
func (pl *plan) finish() {
	pl.keys = make([]string, 0, pl.nkeys)
	pl.args = make([]any, 0, 4+6*len(pl.pol))
	pl.args = append(pl.args, pl.rfBase, "", "", len(pl.pol)) // ARGV 4-7; 5 and 6 are set per call
	for _, p := range pl.pol {
		pl.keys = append(pl.keys, p.keys...)
		pl.args = append(pl.args, string(p.typ), p.name, p.a, p.b, p.c, p.d)
	}
}

func (l *Limiter) explicitPlan(tenant string, req *Request) *plan {
	x := req.Limits
	pl := &plan{tenant: tenant, refKey: "\x00" + tenant, rfBase: l.keys.refusalBase(tenant), explicit: true}
	if x.Rate != nil {
		r := prepareRate(l.keys.ExplicitRate(tenant), x.Rate)
		pl.add(policy{typ: 'r', name: PolicyRate, limit: r.rate.Burst, window: r.window, rate: r.rate, a: r.ei, b: r.burst, keys: []string{r.key}, fail: l.opts.FailMode.Rate})
	}
	for _, w := range x.Windows {
		pl.add(policy{typ: 'w', name: w.Name, limit: w.Limit, window: w.Length, a: strconv.FormatInt(w.Limit, 10), b: strconv.FormatInt(w.Length.Milliseconds(), 10), keys: []string{l.keys.Window(tenant, w.Name, w.Length)}, fail: l.opts.FailMode.Window})
	}
	if req.Concurrency && x.Concurrency > 0 {
		pl.add(policy{typ: 'c', name: PolicyConcurrency, limit: x.Concurrency, a: strconv.FormatInt(x.Concurrency, 10), b: strconv.FormatInt(l.opts.LeaseTTL.Milliseconds(), 10), keys: []string{l.keys.ExplicitConcurrency(tenant)}, fail: l.opts.FailMode.Concurrency})
	}
	pl.finish()
	return pl
}

func (pl *plan) add(p policy) {
	pl.pol = append(pl.pol, p)
	pl.nkeys += len(p.keys)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// errRedisDown marks a decision that must go to the fail modes.
var errRedisDown = errors.New("limiter: redis down")

func (l *Limiter) allow(ctx context.Context, tenant string, req *Request) (*Decision, error) {
	var pl *plan
	var due *prepared // a cached snapshot the script must confirm
	if req.Limits != nil {
		pl = l.explicitPlan(tenant, req)
	} else {
		p, isDue, err := l.snapshot(ctx, tenant)
		if isDue {
			due = p
		}
		if err != nil && !errors.Is(err, errRedisDown) {
			return nil, err
		}
		if p == nil { // Redis down and nothing known of the tenant
			return l.fallbackUnknown()
		}
		pl = l.snapshotPlan(p, req)
		if err != nil {
			return l.fallback(pl, req)
		}
	}
	if len(pl.pol) == 0 {
		return &Decision{Allowed: true, Plan: pl.planName}, nil
	}
	if d := l.cachedRefusal(pl, req); d != nil {
		return d, nil
	}
	if l.redisDown() {
		return l.fallback(pl, req)
	}
	d, err := l.decide(ctx, pl, req, due)
	if errors.Is(err, errRedisDown) {
		return l.fallback(pl, req)
	}
	if err != nil {
		return nil, err
	}
	if !d.Allowed {
		l.cacheRefusal(pl, req, d)
	}
	return d, nil
}

func (l *Limiter) redisDown() bool {
	u := l.downUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// call runs one Redis call bounded by Options.Timeout. A failure of Redis
// (not of the caller's context) starts the cooldown and returns an error
// wrapping errRedisDown; server replies that are bugs (ERR, WRONGTYPE) are
// returned as they are.
func (l *Limiter) call(ctx context.Context, op string, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	var err error
	if l.ctxTimeouts {
		err = fn(cctx)
	} else {
		ch := make(chan error, 1)
		go func() { ch <- fn(cctx) }()
		select {
		case err = <-ch:
		case <-cctx.Done():
			err = cctx.Err()
		}
	}
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if h := l.opts.Hooks.OnRedisError; h != nil {
		h(op, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "WRONGTYPE") {
			return fmt.Errorf("limiter: %s: %w", op, err)
		}
	}
	l.downUntil.Store(time.Now().Add(l.opts.Cooldown).UnixNano())
	return fmt.Errorf("%w: %s: %w", errRedisDown, op, err)
}

// snapshot returns the tenant's prepared snapshot. With an error wrapping
// errRedisDown it may still return the last known snapshot (or nil).
//
// due says that the snapshot is past the safety TTL and must be confirmed
// by the decision's script (no round trip of its own).
func (l *Limiter) snapshot(ctx context.Context, tenant string) (p *prepared, due bool, err error) {
	p, fresh, due := l.cache.get(tenant, time.Now())
	if fresh {
		if h := l.opts.Hooks.OnCacheHit; h != nil {
			h()
		}
		return p, due, nil
	}
	if h := l.opts.Hooks.OnCacheMiss; h != nil {
		h()
	}
	if l.redisDown() {
		return p, false, errRedisDown
	}
	v, err, _ := l.sf.Do(tenant, func() (any, error) {
		return l.fill(context.WithoutCancel(ctx), tenant)
	})
	if err != nil {
		if errors.Is(err, errRedisDown) {
			return p, false, err
		}
		return nil, false, err
	}
	return v.(*prepared), false, nil
}

func (l *Limiter) fill(ctx context.Context, tenant string) (*prepared, error) {
	f := l.cache.beginFill(tenant)
	var p *prepared
	defer func() { l.cache.endFill(tenant, f, p, time.Now()) }()
	var raw []byte
	err := l.call(ctx, "snapshot", func(ctx context.Context) error {
		var err error
		raw, err = l.rdb.Get(ctx, l.keys.Snapshot(tenant)).Bytes()
		return err
	})
	var snap Snapshot
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &snap); err != nil {
			return nil, fmt.Errorf("limiter: snapshot of %q: %w", tenant, err)
		}
	case errors.Is(err, redis.Nil):
		if l.opts.Loader == nil {
			return nil, fmt.Errorf("%w: %q has no snapshot and no loader is configured", ErrUnknownTenant, tenant)
		}
		snap, err = l.opts.Loader(ctx, tenant)
		if err != nil {
			if errors.Is(err, ErrUnknownTenant) {
				return nil, err
			}
			return nil, fmt.Errorf("limiter: loading snapshot of %q: %w", tenant, err)
		}
	default:
		return nil, err
	}
	snap.TenantID = tenant
	p = l.keys.prepare(snap)
	return p, nil
}

// storedVersion reads the version of a stored snapshot; -1 when unreadable.
func storedVersion(raw string) int64 {
	var v struct {
		Version int64 `json:"version"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return -1
	}
	return v.Version
}

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
	peek := req.Cost == 0
	var leaseID string
	for _, p := range pl.pol {
		if p.typ == 'c' && !peek {
			leaseID = newID()
		}
	}
	keys := pl.keys
	n := 3 + len(pl.args)
	if due != nil {
		keys = append(keys[:len(keys):len(keys)], due.entKey) // a copy: pl.keys is shared
		n++
	}
	args := make([]any, n)
	args[0] = req.Cost
	args[1] = boolArg(peek)
	args[2] = "1"
	copy(args[3:], pl.args)
	if due != nil {
		args[n-1] = "1" // one more ARGV: read the snapshot (the last KEY) back
	}
	if leaseID != "" {
		args[4] = leaseID
	}
	args[5] = boolArg(l.opts.UsageLoader != nil)
	for attempt := 0; ; attempt++ {
		res, err := l.runDecide(ctx, keys, args)
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
		if status != 2 {
			if due != nil {
				if len(res) != 5+3*len(pl.pol) {
					return nil, fmt.Errorf("limiter: script reply has %d elements, want %d", len(res), 5+3*len(pl.pol))
				}
				raw, _ := res[len(res)-1].(string)
				l.cache.refreshed(pl.tenant, due, raw != "" && storedVersion(raw) == due.snap.Version, time.Now())
				res = res[:len(res)-1]
			}
			return l.decision(pl, req, res, leaseID)
		}
		if attempt >= 2 {
			args[5] = "0" // someone keeps deleting the counter: count from what Redis has
			continue
		}
		if err := l.seed(ctx, pl, res); err != nil {
			if errors.Is(err, errRedisDown) {
				return nil, err
			}
			if l.opts.FailMode.Quota == FailClosed {
				return nil, ErrUnavailable
			}
			args[5] = "0"
		}
	}
}

func (l *Limiter) runDecide(ctx context.Context, keys []string, args []any) ([]any, error) {
	if l.batch != nil {
		return l.batch.do(ctx, keys, args)
	}
	var res []any
	err := l.call(ctx, "decide", func(ctx context.Context) error {
		var err error
		res, err = decideScript.Run(ctx, l.rdb, keys, args...).Slice()
		return err
	})
	if err != nil {
		// res is not read: a call abandoned at its deadline (client without
		// ContextTimeoutEnabled) may still be writing it.
		return nil, err
	}
	return res, nil
}

// abandoned says that call returned without waiting for its function
// (timeout, cancellation): what the function writes must not be read.
func abandoned(err error) bool {
	return errors.Is(err, errRedisDown) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (l *Limiter) seed(ctx context.Context, pl *plan, res []any) error {
	n, err := toInt64(res[1])
	if err != nil || int(n)*2+2 > len(res) {
		return fmt.Errorf("limiter: malformed seed reply")
	}
	for i := 0; i < int(n); i++ {
		idx, err1 := toInt64(res[2+2*i])
		period, err2 := toInt64(res[3+2*i])
		if err1 != nil || err2 != nil || idx < 1 || int(idx) > len(pl.pol) || period < 0 || period > 1 || pl.pol[idx-1].quota == nil {
			return fmt.Errorf("limiter: malformed seed reply")
		}
		q := pl.pol[idx-1].quota
		durable, err := l.opts.UsageLoader(ctx, pl.tenant, q.meter, q.starts[period])
		if err != nil {
			if h := l.opts.Hooks.OnRedisError; h != nil {
				h("usage", err)
			}
			return fmt.Errorf("limiter: usage of %q %s: %w", pl.tenant, q.meter, err)
		}
		keys := []string{q.keys[2*period], q.keys[2*period+1], q.flush[period]}
		expireAt := q.endsT[period].Add(7 * 24 * time.Hour).UnixMilli()
		if err := l.call(ctx, "seed", func(ctx context.Context) error {
			return seedScript.Run(ctx, l.rdb, keys, durable, expireAt).Err()
		}); err != nil {
			return err
		}
	}
	return nil
}

func (l *Limiter) decision(pl *plan, req *Request, res []any, leaseID string) (*Decision, error) {
	if len(res) != 4+3*len(pl.pol) {
		return nil, fmt.Errorf("limiter: script reply has %d elements, want %d", len(res), 4+3*len(pl.pol))
	}
	var buf [4 + 3*4]int64 // a decision has at most 4 policies in common use
	ints := buf[:0]
	for _, v := range res {
		n, err := toInt64(v)
		if err != nil {
			return nil, err
		}
		ints = append(ints, n)
	}
	d := &Decision{Allowed: ints[0] == 1, Plan: pl.planName, Policies: make([]PolicyStatus, len(pl.pol))}
	for i, p := range pl.pol {
		o := 4 + 3*i
		ps := PolicyStatus{Name: p.name, Limit: p.limit, Window: p.window, Remaining: ints[o], Reset: time.Duration(ints[o+1]) * time.Millisecond, Mode: p.mode}
		switch p.typ {
		case 'q':
			ps.Window = p.quota.windows[ints[o+2]&1]
		case 'c':
			ps.Unit = UnitConcurrent
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
				d.lease = &lease{l: l, key: p.keys[0], id: leaseID}
			}
		}
	}
	return d, nil
}

// lease is a concurrency slot held in Redis or in process.
type lease struct {
	l     *Limiter
	key   string
	id    string
	local *localState
	done  atomic.Bool
}

func (ls *lease) release(ctx context.Context) error {
	if ls.done.Swap(true) {
		return nil
	}
	if ls.local != nil {
		ls.local.releaseConc()
		return nil
	}
	err := ls.l.call(ctx, "release", func(ctx context.Context) error {
		return ls.l.rdb.ZRem(ctx, ls.key, ls.id).Err()
	})
	if errors.Is(err, errRedisDown) {
		return fmt.Errorf("%w (the slot expires after LeaseTTL)", ErrUnavailable)
	}
	return err
}
