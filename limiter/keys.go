package limiter

import (
	"strconv"
	"time"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "tg"

// keyNames names the Redis keys of the limiter. Every key of one tenant
// carries the hash tag {t:<tenant>}, so that one decision script touches a
// single Redis Cluster slot, while different tenants spread over all slots.
// Tollgate's server side (internal/limitstore) writes and reads the same
// layout; its TestKeysMatchLimiter keeps the two in step.
type keyNames struct {
	prefix string
}

func newKeyNames(prefix string) keyNames {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return keyNames{prefix: prefix}
}

// tenantBase returns "<p>:{t:<tenant>}:".
func (k keyNames) tenantBase(tenant string) string {
	return k.prefix + ":{t:" + tenant + "}:"
}

// snapshot is the key of the tenant's entitlement snapshot (JSON).
func (k keyNames) snapshot(tenant string) string { return k.tenantBase(tenant) + "ent" }

// rate is the key of the tenant's token bucket (GCRA theoretical arrival time).
func (k keyNames) rate(tenant string) string { return k.tenantBase(tenant) + "rate" }

// quota is the key of the total used of a meter in the period starting at
// periodStart: the figure the limiter enforces.
func (k keyNames) quota(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "q:" + meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// pending is the key of the growth of a quota counter counted by the
// limiter and not yet flushed to Postgres.
func (k keyNames) pending(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "qp:" + meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// flushing is the key of a claimed, not yet acknowledged flush (a hash with
// fields n and id).
func (k keyNames) flushing(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "qf:" + meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// concurrency is the key of the tenant's concurrency leases (a sorted set
// scored by lease expiry in milliseconds).
func (k keyNames) concurrency(tenant string) string { return k.tenantBase(tenant) + "conc" }

// window is the key of a sliding-window limit of an explicit Limits.
func (k keyNames) window(tenant, name string, window time.Duration) string {
	return k.tenantBase(tenant) + "sw:" + name + ":" + strconv.FormatInt(window.Milliseconds(), 10)
}

// explicitRate is the key of the token bucket of an explicit Limits; it is
// kept apart from the tenant's plan bucket.
func (k keyNames) explicitRate(tenant string) string { return k.tenantBase(tenant) + "xrate" }

// explicitConcurrency is the key of the leases of an explicit Limits.
func (k keyNames) explicitConcurrency(tenant string) string { return k.tenantBase(tenant) + "xconc" }

func (k keyNames) refusalBase(tenant string) string { return k.tenantBase(tenant) + "rf:" }

// invalidations is the pub/sub channel on which snapshot changes are
// announced as "<tenant>:<version>".
func (k keyNames) invalidations() string { return k.prefix + ":ent:inval" }
