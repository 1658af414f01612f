package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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

// LeaseInfo names a concurrency slot held in Redis, for a holder that gives
// it back in a later request (an HTTP API) rather than with Release.
type LeaseInfo struct {
	// ID names the slot to ReleaseLease.
	ID string
	// ExpiresAt is when Redis frees the slot if it is never released
	// (the decision's Redis time plus Options.LeaseTTL).
	ExpiresAt time.Time
}

// Lease returns the slot the decision holds in Redis. ok is false without a
// slot, and for a slot held in process (a fail-mode local decision while
// Redis did not answer): that one has no name another request or instance
// could use, so only Release gives it back.
func (d *Decision) Lease() (LeaseInfo, bool) {
	if d == nil || d.lease == nil || d.lease.local != nil || d.lease.id == "" {
		return LeaseInfo{}, false
	}
	return LeaseInfo{ID: d.lease.id, ExpiresAt: d.lease.expires}, true
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

// ReleaseLease gives back the tenant's concurrency slot id (LeaseInfo.ID of
// a decision on the tenant's snapshot; leases of explicit Limits are not
// covered). found is false when the tenant holds no such lease: released
// already, expired, never issued, or another tenant's (leases are kept per
// tenant, so one tenant cannot release another's). Redis trouble is
// ErrUnavailable; the slot then expires after LeaseTTL.
func (l *Limiter) ReleaseLease(ctx context.Context, tenant, id string) (found bool, err error) {
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
