package limiter

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// prepared is a snapshot with the keys and script arguments of its policies
// worked out once, when it enters the near-cache.
type prepared struct {
	snap    Snapshot
	rate    *preparedRate
	conc    int64
	concKey string
	quotas  map[string]*preparedQuota
	windows []preparedWindow // the plan's windows, in the snapshot's order
	state   string           // the tenant's state hash (keyNames.state)
	base    string           // keyNames.tenantBase
	rfBase  string
	dirty   string
	entKey  string // the snapshot's key
	// grants are the meters the tenant has grants of (the state hash's
	// grant list as read with the snapshot): their decisions draw them
	// (fastGrantsBody, or the general decision with the quota's hard
	// argument + 2).
	grants map[string]bool
	// fromLoader says the snapshot came from Options.Loader, not from
	// Redis: its safety re-read asks the Loader (see recheckInBackground).
	fromLoader bool
	// plans caches the decision plans built from this snapshot (keys and
	// script arguments ready to send), keyed by planKey: at most
	// 4 × (quotas + 1) entries.
	plans sync.Map
	// floors are the tenant's counter floors (plan.floor), handed from
	// one cached snapshot of the tenant to the next (endFill).
	floors *tenantFloors
	// earlier is this snapshot moved one window back (Limiter.earlier).
	earlierOnce sync.Once
	earlier     *prepared
}

// planKey is what of a Request shapes a snapshot's plan; meter is "" when
// the snapshot has no quota for it.
type planKey struct {
	meter      string
	skipQuota  bool
	concurrent bool
}

type preparedRate struct {
	key    string // the hash holding the bucket (field r)
	ei     string // emission interval, µs
	eiF    float64
	burst  string
	rate   Rate
	window time.Duration
}

type preparedQuota struct {
	meter   string
	grants  bool // the tenant has grants of this meter
	limit   int64
	limitS  string
	hard    bool
	mode    QuotaMode
	fields  [4]string // state hash fields: q and f of the current period, of the next
	sfx     [2]string // counterSuffix of the current period, of the next
	endS    string    // period end, ms
	nextS   string    // next period end, ms
	endMs   int64
	nextMs  int64
	startMs int64  // the window's start when the window before it is known, else 0
	startS  string // startMs formatted
	starts  [2]time.Time
	endsT   [2]time.Time
	windows [2]time.Duration
}

func prepareRate(key string, r *Rate) *preparedRate {
	ps, burst := r.PerSecond, r.Burst
	if burst < 0 {
		burst = 0
	}
	ei := 1e12 // a bucket that never refills: refuses for days
	var window time.Duration
	if ps > 0 {
		ei = 1e6 / ps
		window = time.Duration(float64(burst) / ps * float64(time.Second))
	}
	return &preparedRate{
		key:    key,
		ei:     strconv.FormatFloat(ei, 'f', -1, 64),
		eiF:    ei,
		burst:  strconv.FormatInt(burst, 10),
		rate:   Rate{PerSecond: ps, Burst: burst},
		window: window,
	}
}

func (k keyNames) prepare(s Snapshot) *prepared { return k.prepareWith(s, nil) }

// prepareWith is prepare for a tenant with grants of the meters given.
func (k keyNames) prepareWith(s Snapshot, grants map[string]bool) *prepared {
	t := s.TenantID
	p := &prepared{snap: s, conc: s.Concurrency, state: k.state(t), base: k.tenantBase(t), rfBase: k.refusalBase(t), dirty: k.dirtyBase(t), entKey: k.snapshot(t), grants: grants}
	if s.Rate != nil {
		p.rate = prepareRate(p.state, s.Rate)
	}
	if s.Concurrency > 0 {
		p.concKey = k.concurrency(t)
	}
	p.windows = k.prepareWindows(t, s.Windows)
	if len(s.Quotas) > 0 {
		p.quotas = make(map[string]*preparedQuota, len(s.Quotas))
		next := s.NextPeriodEnd
		if !next.After(s.PeriodEnd) {
			// No next period known: assume one of the same length.
			next = s.PeriodEnd.Add(s.PeriodEnd.Sub(s.PeriodStart))
		}
		var startMs int64
		if !s.PrevPeriodStart.IsZero() && s.PrevPeriodStart.Before(s.PeriodStart) {
			startMs = s.PeriodStart.UnixMilli()
		}
		for m, q := range s.Quotas {
			c0, c1 := counterSuffix(m, s.PeriodStart), counterSuffix(m, s.PeriodEnd)
			pq := &preparedQuota{
				meter:   m,
				limit:   q.Limit,
				limitS:  strconv.FormatInt(q.Limit, 10),
				hard:    q.Mode != ModeSoft,
				mode:    q.Mode,
				fields:  [4]string{"q:" + c0, "f:" + c0, "q:" + c1, "f:" + c1},
				sfx:     [2]string{c0, c1},
				endS:    strconv.FormatInt(s.PeriodEnd.UnixMilli(), 10),
				nextS:   strconv.FormatInt(next.UnixMilli(), 10),
				endMs:   s.PeriodEnd.UnixMilli(),
				startMs: startMs,
				startS:  strconv.FormatInt(startMs, 10),
				nextMs:  next.UnixMilli(),
				starts:  [2]time.Time{s.PeriodStart, s.PeriodEnd},
				endsT:   [2]time.Time{s.PeriodEnd, next},
				windows: [2]time.Duration{s.PeriodEnd.Sub(s.PeriodStart), next.Sub(s.PeriodEnd)},
			}
			if pq.mode == "" {
				pq.mode = ModeHard
			}
			pq.grants = p.grants[m]
			p.quotas[m] = pq
		}
	}
	return p
}

// snapCache is the bounded entitlement near-cache. An entry is fresh while
// it is younger than the TTL, was filled in the current generation (the
// generation moves when the invalidation subscription is lost or renewed)
// and has not been invalidated. Entries that are no longer fresh are kept as
// the last known limits for the local fail mode, never for Redis decisions.
type snapCache struct {
	// mu is read-locked by get, the path of every decision; recency in the
	// LRU is bumped under the write lock at most once per bumpEvery per
	// entry, so that concurrent decisions do not queue on one mutex.
	mu         sync.RWMutex
	bumpEvery  time.Duration
	lru        *lru[string, *cacheEntry]
	gen        uint64
	subscribed bool
	ttl        time.Duration
	filling    map[string]*fillState
}

type cacheEntry struct {
	p       *prepared
	fetched time.Time
	gen     uint64
	stale   bool
	bumped  atomic.Int64 // unix ns of the last LRU bump
}

type fillState struct {
	gen        uint64
	minVersion int64
	dropped    bool
}

func newSnapCache(size int, ttl time.Duration) *snapCache {
	return &snapCache{lru: newLRU[string, *cacheEntry](size), ttl: ttl, filling: map[string]*fillState{}, bumpEvery: max(time.Second, ttl/4)}
}

// get returns the cached snapshot and whether it is fresh. due says that
// it is fresh except for its age: past the safety TTL, not invalidated,
// filled under the current subscription. Such an entry is still used, and
// the decision's script reads the stored snapshot back in the same round
// trip to confirm it (see refreshed).
func (c *snapCache) get(tenant string, now time.Time) (p *prepared, fresh, due bool) {
	c.mu.RLock()
	e, ok := c.lru.peek(tenant)
	if !ok {
		c.mu.RUnlock()
		return nil, false, false
	}
	p = e.p
	switch {
	case e.stale || e.gen != c.gen || e.p == nil:
	case now.Sub(e.fetched) < c.ttl:
		fresh = true
	default:
		fresh, due = true, true
	}
	bump := now.UnixNano()-e.bumped.Load() >= int64(c.bumpEvery)
	c.mu.RUnlock()
	if bump {
		c.mu.Lock()
		if cur, ok := c.lru.get(tenant); ok && cur == e { // get makes it recent
			e.bumped.Store(now.UnixNano())
		}
		c.mu.Unlock()
	}
	return p, fresh, due
}

// refreshed records what the decision script read of the tenant's stored
// snapshot (raw; nil when missing) for the cached p: the same version makes
// the entry young again; anything else makes it stale, so that the next
// decision reads it anew. An entry invalidated or replaced meanwhile is left
// alone.
func (c *snapCache) refreshed(tenant string, p *prepared, sameVersion bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.get(tenant)
	if !ok || e.p != p || e.stale || e.gen != c.gen {
		return
	}
	if sameVersion {
		e.fetched = now
	} else {
		e.stale = true
	}
}

func (c *snapCache) beginFill(tenant string) *fillState {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := &fillState{gen: c.gen}
	c.filling[tenant] = f
	return f
}

// endFill stores a filled snapshot: fresh unless the subscription is down,
// the generation moved or an invalidation for a newer version arrived while
// it was read.
func (c *snapCache) endFill(tenant string, f *fillState, p *prepared, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.filling[tenant] == f {
		delete(c.filling, tenant)
	}
	if p == nil {
		return
	}
	stale := !c.subscribed || f.gen != c.gen || f.dropped || p.snap.Version < f.minVersion
	if p.floors == nil {
		if old, ok := c.lru.peek(tenant); ok && old.p != nil && old.p.floors != nil {
			p.floors = old.p.floors
		} else {
			p.floors = &tenantFloors{}
		}
	}
	e := &cacheEntry{p: p, fetched: now, gen: c.gen, stale: stale}
	e.bumped.Store(now.UnixNano())
	c.lru.put(tenant, e)
}

// replace puts p in old's place in the tenant's entry (the same snapshot
// made again with the grants a rebuild wrote), leaving an entry that no
// longer holds old alone.
func (c *snapCache) replace(tenant string, old, p *prepared) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.lru.peek(tenant); ok && e.p == old {
		e.p = p
	}
}

// invalidate marks a tenant's entry stale unless it already holds version
// (or newer); version < 0 always invalidates.
func (c *snapCache) invalidate(tenant string, version int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.filling[tenant]; ok {
		if version < 0 {
			f.dropped = true
		} else if version > f.minVersion {
			f.minVersion = version
		}
	}
	if e, ok := c.lru.get(tenant); ok {
		if version < 0 || e.p == nil || e.p.snap.Version < version {
			e.stale = true
		}
	}
}

// dropAll makes every entry stale (subscription lost or renewed).
func (c *snapCache) dropAll(subscribed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.subscribed = subscribed
}

func (c *snapCache) isSubscribed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subscribed
}

// isFresh says whether the tenant's entry would be used as it is.
func (c *snapCache) isFresh(tenant string) bool {
	_, fresh, _ := c.get(tenant, time.Now())
	return fresh
}

// hasRoom says whether the near-cache is below its capacity.
func (c *snapCache) hasRoom() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lru.len() < c.lru.max
}
