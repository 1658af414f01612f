package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// External ids (the backend's own id for a tenant). Tollgate's server
// keeps, next to each snapshot, an alias from the tenant's external id to
// its tenant id (keyspace's Alias key), and announces the tenant on the
// invalidation channel whenever its external id changes. ExternalTenant
// reads the alias once and caches it: once known, addressing a tenant by
// its external id costs no round trip more than by its tenant id. The
// cache follows the snapshot cache's rules: an invalidation of the tenant
// drops its aliases, a lost subscription drops them all (and nothing is
// cached until it is back), and an entry is read again after CacheTTL.

// ExternalTenant returns the tenant id that externalID, the backend's own
// id for a tenant, names, for Allow, Reserve and the other calls that take
// a tenant id. The first call for an external id reads its alias from
// Redis (one round trip; ExternalLoader when Redis has none); later calls
// answer from the process's cache, without a round trip, until the
// tenant's invalidation arrives (its external id changed or was removed)
// or CacheTTL passes. An external id no tenant has (or one that breaks
// Tollgate's rule, 1-128 characters of A-Z a-z 0-9 . _ : @ -) is
// ErrUnknownTenant, as an unknown tenant id is; Redis unreachable without
// an ExternalLoader is ErrUnavailable.
func (l *Limiter) ExternalTenant(ctx context.Context, externalID string) (string, error) {
	if !keyspace.ValidExternalID(externalID) {
		return "", fmt.Errorf("%w: no tenant has the external id %q", ErrUnknownTenant, externalID)
	}
	if l.closed.Load() {
		return "", ErrClosed
	}
	now := time.Now()
	if id, ok := l.aliases.get(externalID, now, l.opts.CacheTTL); ok {
		return id, nil
	}
	v, err, _ := l.sf.Do("\x00ext:"+externalID, func() (any, error) {
		return l.resolveExternal(context.WithoutCancel(ctx), externalID)
	})
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// resolveExternal reads the alias (then asks ExternalLoader) and caches
// the answer unless an invalidation arrived meanwhile.
func (l *Limiter) resolveExternal(ctx context.Context, ext string) (string, error) {
	epoch, subscribed := l.aliases.epochNow(), l.cache.isSubscribed()
	var tenant string
	err := l.call(ctx, "alias", func(ctx context.Context) error {
		var err error
		tenant, err = l.rdb.Get(ctx, l.keys.ks.Alias(ext)).Result()
		return err
	})
	switch {
	case errors.Is(err, redis.Nil):
		tenant, err = l.loadExternal(ctx, ext, nil)
	case err != nil && errors.Is(err, errRedisDown):
		tenant, err = l.loadExternal(ctx, ext, err)
	}
	if err != nil {
		return "", err
	}
	if subscribed {
		l.aliases.put(ext, tenant, time.Now(), epoch)
	}
	return tenant, nil
}

// loadExternal asks ExternalLoader for an alias Redis lacks (redisErr nil)
// or could not give.
func (l *Limiter) loadExternal(ctx context.Context, ext string, redisErr error) (string, error) {
	if l.opts.ExternalLoader == nil {
		if redisErr != nil {
			return "", fmt.Errorf("%w: resolving external id %q: %w", ErrUnavailable, ext, redisErr)
		}
		return "", fmt.Errorf("%w: no tenant has the external id %q", ErrUnknownTenant, ext)
	}
	tenant, err := l.opts.ExternalLoader(ctx, ext)
	switch {
	case errors.Is(err, ErrUnknownTenant):
		return "", err
	case err != nil:
		if h := l.opts.Hooks.OnLoaderError; h != nil {
			h("external", err)
		}
		return "", fmt.Errorf("%w: resolving external id %q: %w", ErrUnavailable, ext, err)
	case tenant == "":
		return "", fmt.Errorf("%w: no tenant has the external id %q", ErrUnknownTenant, ext)
	}
	return tenant, nil
}

// aliasCache maps external ids to tenant ids, bounded, with the tenants'
// reverse index that an invalidation needs.
type aliasCache struct {
	mu       sync.Mutex
	max      int
	byExt    map[string]aliasEntry
	byTenant map[string]map[string]struct{}
	// epoch moves with every invalidation, so that a read begun before
	// one is not cached after it.
	epoch uint64
}

type aliasEntry struct {
	tenant string
	at     time.Time
}

func newAliasCache(max int) *aliasCache {
	return &aliasCache{max: max, byExt: map[string]aliasEntry{}, byTenant: map[string]map[string]struct{}{}}
}

func (c *aliasCache) get(ext string, now time.Time, ttl time.Duration) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byExt[ext]
	if !ok || now.Sub(e.at) >= ttl {
		return "", false
	}
	return e.tenant, true
}

func (c *aliasCache) epochNow() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

func (c *aliasCache) put(ext, tenant string, now time.Time, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return // an invalidation arrived while it was read: maybe stale
	}
	c.removeLocked(ext)
	for len(c.byExt) >= c.max {
		for k := range c.byExt { // any one: the map's order is random
			c.removeLocked(k)
			break
		}
	}
	c.byExt[ext] = aliasEntry{tenant: tenant, at: now}
	set := c.byTenant[tenant]
	if set == nil {
		set = map[string]struct{}{}
		c.byTenant[tenant] = set
	}
	set[ext] = struct{}{}
}

func (c *aliasCache) removeLocked(ext string) {
	e, ok := c.byExt[ext]
	if !ok {
		return
	}
	delete(c.byExt, ext)
	if set := c.byTenant[e.tenant]; set != nil {
		delete(set, ext)
		if len(set) == 0 {
			delete(c.byTenant, e.tenant)
		}
	}
}

// invalidate drops the aliases of tenant ("" = every alias).
func (c *aliasCache) invalidate(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if tenant == "" {
		clear(c.byExt)
		clear(c.byTenant)
		return
	}
	for ext := range c.byTenant[tenant] {
		delete(c.byExt, ext)
	}
	delete(c.byTenant, tenant)
}
