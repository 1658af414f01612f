package limiter

import (
	"context"
	"errors"
	"fmt"
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
	keys        keyNames
	cache       *snapCache
	aliases     *aliasCache // external id → tenant id (external.go)
	sf          singleflight.Group
	ctxTimeouts bool

	inFlight atomic.Int64
	adaptive *adaptiveLimit // Options.AdaptiveConcurrency
	down     atomic.Bool    // Redis judged down on evidence (redis.go) until a probe answers
	health   health
	// slots bounds the Redis calls in progress to the client's pool, so
	// that the wait for a connection is the process's own queue (bounded
	// and shed, see callLate), apart from Redis's answer time. Nil for
	// Cluster and Ring clients (a pool per node).
	slots     chan struct{}
	lastPong  atomic.Int64 // unix ns of the last probe Redis answered
	lastOK    atomic.Int64 // unix ns (to 1ms) of the last call Redis answered
	probeMu   sync.Mutex
	probeConn *redis.Conn // alive's connection (single-node clients)
	loop      loopback    // alive's measure of this process's own lateness
	closed    atomic.Bool
	live      atomic.Int64 // instances alive by their heartbeats (instances.go)
	id        string       // this instance's heartbeat member

	refusalMu sync.Mutex
	refusals  *lru[string, []cachedRefusal]
	refusalN  atomic.Int64 // entries in refusals, read without the lock
	tally     refusalTally // cached refusals not yet added to Redis
	charges   chargeTally  // quota units the fail modes admitted, not yet in Redis

	local   *localStates
	leases  *leases       // Options.Prefetch (leased.go)
	bgFills chan struct{} // near-cache fills in the background (byRef)
	// touches holds, per tenant, the time ("at", ms) to write into its
	// limits hash by its next decision by reference: the Loader confirmed
	// the hash's version (see recheckInBackground).
	touches sync.Map
	batch   *batcher

	refMu     sync.Mutex               // serialises putShape
	refShapes atomic.Pointer[shapeMap] // decisions by reference (byref.go)
	late      lateTakes                // decisions lost while their script may take units

	pubsub *redis.PubSub
	ctx    context.Context // ends at Close
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
		keys:     newKeyNames(opts.Prefix),
		cache:    newSnapCache(opts.CacheSize, opts.CacheTTL),
		aliases:  newAliasCache(opts.CacheSize),
		refusals: newLRU[string, []cachedRefusal](opts.CacheSize),
		local:    newLocalStates(opts.CacheSize),
		bgFills:  make(chan struct{}, 4),
	}
	switch c := rdb.(type) {
	case *redis.Client:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
		// Less the probe's connection, and one spare.
		if n := c.Options().PoolSize - 2; n > 0 {
			l.slots = make(chan struct{}, n)
		}
	case *redis.ClusterClient:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
		l.keys.ks.Cluster = true
	case *redis.Ring:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.ctx, l.cancel = ctx, cancel
	l.health.lastOK = time.Now()
	l.id = newID()
	l.live.Store(int64(opts.ExpectedInstances))
	if opts.AdaptiveConcurrency {
		l.adaptive = newAdaptiveLimit(opts.MaxInFlight)
	}
	if opts.Batching {
		l.batch = newBatcher(ctx, l, opts.MaxBatch)
	}
	if opts.Prefetch {
		l.leases = newLeases(l)
	}
	l.pubsub = rdb.Subscribe(ctx, l.keys.invalidations())
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		// Dial the probe's connection now: a first PING that must dial
		// would take more round trips than the timeout allows.
		pctx, cancel := context.WithTimeout(ctx, l.hardWait())
		_ = l.ping(pctx)
		cancel()
	}()
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.flushRefusalsLoop(ctx) }()
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.subscribe(ctx) }()
	return l, nil
}

// Close stops the invalidation subscription (and the batcher) and, in the
// leased mode, gives the unused quota units of its leases back. It does not
// close the Redis client, which belongs to the caller.
func (l *Limiter) Close() error {
	if l.closed.Load() {
		return nil
	}
	if l.leases != nil {
		// Before closed is set: takes in flight finish first, and their
		// units go back too.
		l.leases.close()
	}
	if l.closed.Swap(true) {
		return nil
	}
	l.cancel()
	err := l.pubsub.Close() // unblocks the subscription's read
	l.wg.Wait()
	l.probeMu.Lock()
	if l.probeConn != nil {
		_ = l.probeConn.Close()
	}
	l.probeMu.Unlock()
	l.loop.close()
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("limiter: closing subscription: %w", err)
	}
	return nil
}

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
	if a := l.adaptive; a != nil {
		start, ok := a.acquire()
		if !ok {
			return nil, ErrOverloaded
		}
		defer func() { a.release(start) }()
	} else if max := l.opts.MaxInFlight; max > 0 {
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
	if req.Reserve && d.Allowed && !req.Peek && d.Fallback == "" {
		if err := l.reserve(ctx, tenant, &req, d); err != nil {
			return nil, err
		}
	}
	if d.Shadow || (!d.Allowed && l.opts.Shadow) {
		d.Allowed, d.Shadow = true, true
	}
	if h := l.opts.Hooks.OnDecision; h != nil {
		h(tenant, d)
	}
	return d, nil
}

func (l *Limiter) allow(ctx context.Context, tenant string, req *Request) (*Decision, error) {
	var pl *plan
	var due *prepared // a cached snapshot the script must confirm
	if req.Limits != nil {
		pl = l.explicitPlan(tenant, req)
	} else {
		// Past the near-cache's capacity a miss is decided by reference
		// (one trip); below it, reading the snapshot into the cache costs
		// the one extra trip once and saves work afterwards.
		if !l.redisDown() && !l.cache.isFresh(tenant) && !l.cache.hasRoom() {
			d, ok, err := l.byRef(ctx, tenant, req)
			if ok || (err != nil && !errors.Is(err, errRedisDown)) {
				return d, err
			}
			// No limits hash yet, or Redis failed: read the snapshot (or
			// take the fail modes' path) as before.
		}
		p, isDue, err := l.snapshot(ctx, tenant)
		if isDue {
			due = p
		}
		if err != nil && !errors.Is(err, errRedisDown) && !errors.Is(err, errLoaderDown) {
			return nil, err
		}
		if p == nil { // Redis or the loader down and nothing known of the tenant
			return l.fallbackUnknown(req)
		}
		pl = l.snapshotPlan(p, req)
		if err != nil && errors.Is(err, errRedisDown) && !l.redisDown() && pl.hasLocal() {
			return nil, lostCall(err)
		}
		if err != nil {
			// Units leased before Redis went away are still ours to spend
			// (until the lease expires), on the limits they were taken under.
			if l.leases != nil && l.leases.covers(pl, req) {
				if d := l.leases.fromHeld(pl, req); d != nil {
					return d, nil
				}
			}
			// A refusal cached before Redis went away still holds.
			if d := l.cachedRefusal(pl, req); d != nil {
				return d, nil
			}
			l.seedKnown(ctx, pl)
			return l.fallback(pl, req)
		}
	}
	if len(pl.pol) == 0 {
		return &Decision{Allowed: true, Plan: pl.planName}, nil
	}
	leased := l.leases != nil && l.leases.covers(pl, req)
	if leased {
		// Units held here admit before a cached refusal: Redis may have
		// refused because this instance holds what was left.
		if d := l.leases.fromHeld(pl, req); d != nil {
			return d, nil
		}
	}
	if d := l.cachedRefusal(pl, req); d != nil {
		return d, nil
	}
	// A lease already held decides even while Redis is down; only taking
	// more needs Redis (and falls to the fail modes without it).
	if l.redisDown() && !leased {
		l.seedKnown(ctx, pl)
		return l.fallback(pl, req)
	}
	var d *Decision
	var err error
	epoch := l.late.epoch()
	if leased {
		d, err = l.leases.allow(ctx, pl, req, due)
	} else {
		d, err = l.decide(ctx, pl, req, due)
	}
	if errors.Is(err, errRedisDown) && !l.redisDown() && pl.hasLocal() {
		fellBack(err, nil)
		return nil, lostCall(err)
	}
	if errors.Is(err, errRedisDown) {
		l.seedKnown(ctx, pl)
		d, ferr := l.fallback(pl, req)
		fellBack(err, d) // d is nil with ferr
		return d, ferr
	}
	if err != nil {
		fellBack(err, nil)
		return nil, err
	}
	if d.Fallback != "" { // decided without a counter (see unbuilt)
		return d, nil
	}
	if !d.Allowed && !leased {
		d = l.afterLateTakes(ctx, pl, req, d, epoch)
	}
	if !d.Allowed {
		l.cacheRefusal(pl, req, d)
	}
	l.noteQuotas(pl, d)
	return d, nil
}

// hasLocal says whether a policy of the plan has the local fail mode.
func (pl *plan) hasLocal() bool {
	for i := range pl.pol {
		if pl.pol[i].fail == FailLocal {
			return true
		}
	}
	return false
}

// lostCall is the answer to a decision whose Redis call was lost while
// Redis is not judged down (it answers others, or has not failed for long):
// the local mode's shares are for outages, and admitting here beside the
// instances Redis still serves would overshoot. The client may retry; a
// late answer that took units gives them back (lateDecision).
func lostCall(err error) error {
	return fmt.Errorf("%w (Redis did not answer this decision in time; retry): %w", ErrUnavailable, err)
}
