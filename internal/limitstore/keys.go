package limitstore

import (
	"strconv"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// DefaultPrefix is the key prefix of Tollgate's own processes, the
// limiter's default.
const DefaultPrefix = limiter.DefaultPrefix

// Keys names the Redis keys of the limiter. The layout is the limiter's
// (its unexported keyNames); TestKeysMatchLimiter keeps them in step. Every key of one tenant carries
// the hash tag {t:<tenant>}, so that one decision script touches a single
// Redis Cluster slot, while different tenants spread over all slots.
type Keys struct {
	// Prefix starts every key; "" means DefaultPrefix.
	Prefix string
	// Cluster names the dirty marks per slot, as the limiter does on a
	// Redis Cluster client (see DirtyPending).
	Cluster bool
}

// Base is the prefix in use ("" means DefaultPrefix).
func (k Keys) Base() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	return k.Prefix
}

// tenantBase returns "<p>:{t:<tenant>}:".
func (k Keys) tenantBase(tenant string) string {
	return k.Base() + ":{t:" + tenant + "}:"
}

// Snapshot is the key of the tenant's entitlement snapshot (JSON).
func (k Keys) Snapshot(tenant string) string { return k.tenantBase(tenant) + "ent" }

// Limits is the key of the tenant's limits hash, which the limiter writes
// from the snapshot for its decisions by reference; writing or deleting
// the snapshot deletes it.
func (k Keys) Limits(tenant string) string { return k.tenantBase(tenant) + "lim" }

// Rate is the key of the tenant's token bucket (GCRA theoretical arrival time).
func (k Keys) Rate(tenant string) string { return k.tenantBase(tenant) + "rate" }

// Quota is the key of the total used of a meter in the period starting at
// periodStart: the figure the limiter enforces.
func (k Keys) Quota(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "q:" + meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// Pending is the key of the growth of a Quota counter counted by the limiter
// and not yet flushed to Postgres.
func (k Keys) Pending(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "qp:" + meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// Flushing is the key of a claimed, not yet acknowledged flush (a hash with
// fields n and id); see Store.ClaimPending.
func (k Keys) Flushing(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "qf:" + meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// Concurrency is the key of the tenant's concurrency leases (a sorted set
// scored by lease expiry in milliseconds).
func (k Keys) Concurrency(tenant string) string { return k.tenantBase(tenant) + "conc" }

// Window is the key of a sliding-window limit of an explicit Limits.
func (k Keys) Window(tenant, name string, window time.Duration) string {
	return k.tenantBase(tenant) + "sw:" + name + ":" + strconv.FormatInt(window.Milliseconds(), 10)
}

// ExplicitRate is the key of the token bucket of an explicit Limits; it is
// kept apart from the tenant's plan bucket.
func (k Keys) ExplicitRate(tenant string) string { return k.tenantBase(tenant) + "xrate" }

// ExplicitConcurrency is the key of the leases of an explicit Limits.
func (k Keys) ExplicitConcurrency(tenant string) string { return k.tenantBase(tenant) + "xconc" }

// Refusals is the key of the hash counting the tenant's refusals per policy
// on one UTC day.
func (k Keys) Refusals(tenant string, day time.Time) string {
	return k.refusalBase(tenant) + day.UTC().Format("20060102")
}

func (k Keys) refusalBase(tenant string) string { return k.tenantBase(tenant) + "rf:" }

// Invalidations is the pub/sub channel on which snapshot changes are
// announced as "<tenant>:<version>".
func (k Keys) Invalidations() string { return k.Base() + ":ent:inval" }
