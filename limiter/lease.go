package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter/internal/hook"
)

// This file holds concurrency slots and gives them back.

// lease is a concurrency slot held in Redis or in process.
type lease struct {
	l     *Limiter
	key   string
	id    string
	local *localState
	// expires is when Redis frees the slot unreleased (a Redis lease).
	expires time.Time
	done    atomic.Bool
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

func init() {
	hook.Lease = func(d any) (string, time.Time, bool) { return d.(*Decision).redisLease() }
	hook.ReleaseLease = func(ctx context.Context, l any, tenant, id string) (bool, error) {
		return l.(*Limiter).releaseLease(ctx, tenant, id)
	}
}

// redisLease returns the slot the decision holds in Redis (its id and
// when Redis frees it unreleased), for Tollgate's HTTP API whose clients
// give it back in a later request (package tgserver). ok is false without
// a slot, and for a slot held in process (a fail-mode local decision while
// Redis did not answer): that one has no name another request or instance
// could use, so only Release gives it back.
func (d *Decision) redisLease() (id string, expires time.Time, ok bool) {
	if d == nil || d.lease == nil || d.lease.local != nil || d.lease.id == "" {
		return "", time.Time{}, false
	}
	return d.lease.id, d.lease.expires, true
}

// releaseLeaseScript removes lease ARGV[1] from the tenant's leases. It
// answers 1 only for a lease still held: an expired one (not yet swept by a
// decision) already gave its slot back, so releasing it frees nothing.
var releaseLeaseScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) <= now_ms then return 0 end
return 1
`)

// releaseLease gives back the tenant's concurrency slot id (redisLease of
// a decision on the tenant's snapshot; leases of explicit Limits are not
// covered). found is false when the tenant holds no such lease: released
// already, expired, never issued, or another tenant's (leases are kept per
// tenant, so one tenant cannot release another's). Redis trouble is
// ErrUnavailable; the slot then expires after LeaseTTL.
func (l *Limiter) releaseLease(ctx context.Context, tenant, id string) (found bool, err error) {
	if tenant == "" || id == "" {
		return false, nil
	}
	var n int64
	err = l.call(ctx, "release", func(ctx context.Context) error {
		var err error
		n, err = releaseLeaseScript.Run(ctx, l.rdb, []string{l.keys.concurrency(tenant)}, id).Int64()
		return err
	})
	if errors.Is(err, errRedisDown) {
		return false, fmt.Errorf("%w (the slot expires after LeaseTTL)", ErrUnavailable)
	}
	if err != nil {
		return false, err
	}
	return n == 1, nil
}
