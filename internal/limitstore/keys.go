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

// State is the key of the tenant's state hash (the limiter's
// keyNames.state): the token bucket (field r) and the period counters,
// each with its flushed mark and claim fields (see CounterFields).
func (k Keys) State(tenant string) string { return k.tenantBase(tenant) + "st" }

// Counter names the state hash fields of one period counter: q:<suffix>
// is the total used (what the limiter enforces), f:<suffix> the flushed
// mark (how much of it is in Postgres or claimed by a flush), ci/cn the
// last claimed flush (id, units), ca the last acknowledged claim's id (the
// claim in ci is pending while ci ≠ ca) and g usage counted while q was
// missing (added when it is rebuilt). What is unflushed is q − f.
type Counter struct {
	Suffix string // "<meter>:<period start unix>"
}

// CounterOf returns the counter of meter in the period starting at periodStart.
func CounterOf(meter string, periodStart time.Time) Counter {
	return Counter{Suffix: meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)}
}

// Used is the field of the counter's total used.
func (c Counter) Used() string { return "q:" + c.Suffix }

// Flushed is the field of the counter's flushed mark.
func (c Counter) Flushed() string { return "f:" + c.Suffix }

// Missed is the field of usage counted while the counter was missing
// (settled reservations, a lost claim's unflushed growth), which its
// rebuild adds.
func (c Counter) Missed() string { return "g:" + c.Suffix }

// Mark is the name the counter is known by in the dirty set:
// "<p>:{t:<tenant>}:qp:<meter>:<unix>" (no key has that name).
func (k Keys) Mark(tenant, meter string, periodStart time.Time) string {
	return k.tenantBase(tenant) + "qp:" + CounterOf(meter, periodStart).Suffix
}

// Concurrency is the key of the tenant's concurrency leases (a sorted set
// scored by lease expiry in milliseconds).
func (k Keys) Concurrency(tenant string) string { return k.tenantBase(tenant) + "conc" }

// Window is the key of a sliding-window limit of an explicit Limits.
func (k Keys) Window(tenant, name string, window time.Duration) string {
	return k.tenantBase(tenant) + "sw:" + name + ":" + strconv.FormatInt(window.Milliseconds(), 10)
}

// ExplicitRate is the key of the hash holding the token bucket of an
// explicit Limits; it is kept apart from the tenant's plan bucket.
func (k Keys) ExplicitRate(tenant string) string { return k.tenantBase(tenant) + "xr" }

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
