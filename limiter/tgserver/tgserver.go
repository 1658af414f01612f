// Package tgserver is for Tollgate's own server, not for backends: it
// exposes what Tollgate's HTTP API needs of a Limiter beyond deciding, so
// that package limiter's API stays what a backend needs. Its API may change
// in any release of the limiter module.
//
// Tollgate's tenant API holds concurrency slots for clients that decide
// over HTTP (POST /v1/check with "concurrency": true, DELETE
// /v1/leases/{id}): the slot is named in the answer and given back in a
// later request, maybe to another instance of the api.
package tgserver

import (
	"context"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/internal/hook"
)

// LeaseInfo names a concurrency slot held in Redis, for a holder that gives
// it back in a later request rather than with Decision.Release.
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
// could use, so only Decision.Release gives it back.
func Lease(d *limiter.Decision) (LeaseInfo, bool) {
	id, exp, ok := hook.Lease(d)
	if !ok {
		return LeaseInfo{}, false
	}
	return LeaseInfo{ID: id, ExpiresAt: exp}, true
}

// ReleaseLease gives back the tenant's concurrency slot id (LeaseInfo.ID of
// a decision on the tenant's snapshot; leases of explicit Limits are not
// covered). found is false when the tenant holds no such lease: released
// already, expired, never issued, or another tenant's (leases are kept per
// tenant, so one tenant cannot release another's). Redis trouble is
// limiter.ErrUnavailable; the slot then expires after Options.LeaseTTL.
func ReleaseLease(ctx context.Context, l *limiter.Limiter, tenant, id string) (found bool, err error) {
	return hook.ReleaseLease(ctx, l, tenant, id)
}
