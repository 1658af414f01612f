package limiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// This file finds a tenant's snapshot: near-cache, Redis, then Options.Loader.

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
		if p == nil {
			return l.loadDirect(ctx, tenant)
		}
		return p, false, errRedisDown
	}
	v, err, _ := l.sf.Do(tenant, func() (any, error) {
		return l.fill(context.WithoutCancel(ctx), tenant)
	})
	if err != nil {
		if errors.Is(err, errRedisDown) && p == nil {
			return l.loadDirect(ctx, tenant)
		}
		if errors.Is(err, errRedisDown) || errors.Is(err, errLoaderDown) {
			return p, false, err // the last known limits, if any, for the fail modes
		}
		return nil, false, err
	}
	return v.(*prepared), false, nil
}

// loadDirect asks the Loader for the snapshot of a tenant this process
// knows nothing of while Redis cannot be read, so that the fail modes
// decide with its real limits (never open by accident). It returns the
// snapshot with an error wrapping errRedisDown (the decision goes to the
// fail modes), ErrUnknownTenant, or no snapshot and an error wrapping
// errLoaderDown or errRedisDown.
func (l *Limiter) loadDirect(ctx context.Context, tenant string) (*prepared, bool, error) {
	if l.opts.Loader == nil {
		return nil, false, errRedisDown
	}
	v, err, _ := l.sf.Do("\x00load:"+tenant, func() (any, error) {
		f := l.cache.beginFill(tenant)
		var p *prepared
		defer func() { l.cache.endFill(tenant, f, p, time.Now()) }()
		snap, err := l.opts.Loader(context.WithoutCancel(ctx), tenant)
		if err != nil {
			if errors.Is(err, ErrUnknownTenant) {
				return nil, err
			}
			if h := l.opts.Hooks.OnLoaderError; h != nil {
				h("snapshot", err)
			}
			return nil, fmt.Errorf("%w: snapshot of %q: %w", errLoaderDown, tenant, err)
		}
		snap.TenantID = tenant
		p = l.keys.prepare(snap)
		p.fromLoader = true
		return p, nil
	})
	if err != nil {
		return nil, false, err
	}
	return v.(*prepared), false, fmt.Errorf("%w: snapshot of %q from the loader", errRedisDown, tenant)
}

func (l *Limiter) fill(ctx context.Context, tenant string) (*prepared, error) {
	f := l.cache.beginFill(tenant)
	var p *prepared
	defer func() { l.cache.endFill(tenant, f, p, time.Now()) }()
	var raw []byte
	var grantList string
	err := l.call(ctx, "snapshot", func(ctx context.Context) error {
		// the grant list rides along (same slot, one round trip): which
		// meters' decisions draw grants
		var get *redis.StringCmd
		var hget *redis.StringCmd
		_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			get = p.Get(ctx, l.keys.snapshot(tenant))
			hget = p.HGet(ctx, l.keys.state(tenant), keyspace.GrantsField)
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		grantList = hget.Val()
		raw, err = get.Bytes()
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
			if h := l.opts.Hooks.OnLoaderError; h != nil {
				h("snapshot", err)
			}
			// Whoever keeps the snapshots does not answer: like Redis down,
			// the fail modes decide.
			return nil, fmt.Errorf("%w: snapshot of %q: %w", errLoaderDown, tenant, err)
		}
	default:
		return nil, err
	}
	snap.TenantID = tenant
	p = l.keys.prepareWith(snap, grantMeters(grantList))
	p.fromLoader = raw == nil
	l.writeLimits(ctx, p, raw != nil) // later misses of this tenant are decided in one trip
	return p, nil
}

// grantMeters returns the meters a grants index (keyspace.GrantsField)
// names; nil for none.
func grantMeters(list string) map[string]bool {
	var m map[string]bool
	for _, f := range strings.Fields(list) {
		if m == nil {
			m = map[string]bool{}
		}
		m[f] = true
	}
	return m
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
