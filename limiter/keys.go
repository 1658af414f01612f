package limiter

import (
	"strconv"
	"sync"
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
	prefix  string
	cluster bool // dirty marks per slot (see dirtyBase)
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

// state is the key of the tenant's state hash: everything a decision
// reads and writes on every call lives in it, so that one HMGET and one
// HSET do the work (see decideBody):
//
//	r                  the token bucket's theoretical arrival time (µs)
//	x                  the hash's expiry (ms) as the scripts last set it
//	e                  epoch, moved by every flush acknowledgement that finds
//	                   its claim lost, so that a rebuild in flight reads Postgres again
//	q:<meter>:<unix>   total used of a meter in the period starting at <unix>
//	f:<meter>:<unix>   flushed mark: how much of q was moved to Postgres (or
//	                   is claimed by a flush); what is unflushed is q − f
//	ci:… cn:…          the last claimed flush: id and units; it is not yet
//	                   acknowledged (pending) while ci ≠ ca
//	ca:…               the id of the last acknowledged claim
//	g:…                usage counted while q was missing, added by its rebuild
func (k keyNames) state(tenant string) string { return k.tenantBase(tenant) + "st" }

// counterSuffix is "<meter>:<period start unix>", the state hash field
// suffix of one period counter.
func counterSuffix(meter string, periodStart time.Time) string {
	return meter + ":" + strconv.FormatInt(periodStart.Unix(), 10)
}

// A counter with unflushed usage is known in the dirty set by its mark,
// "<p>:{t:<tenant>}:qp:<meter>:<unix>" (no key has that name; plan.mark).

// concurrency is the key of the tenant's concurrency leases (a sorted set
// scored by lease expiry in milliseconds).
func (k keyNames) concurrency(tenant string) string { return k.tenantBase(tenant) + "conc" }

// window is the key of a sliding-window limit of an explicit Limits.
func (k keyNames) window(tenant, name string, window time.Duration) string {
	return k.tenantBase(tenant) + "sw:" + name + ":" + strconv.FormatInt(window.Milliseconds(), 10)
}

// explicitRate is the key of the hash holding the token bucket (field r,
// and x as in state) of an explicit Limits; it is kept apart from the
// tenant's plan bucket.
func (k keyNames) explicitRate(tenant string) string { return k.tenantBase(tenant) + "xr" }

// explicitConcurrency is the key of the leases of an explicit Limits.
func (k keyNames) explicitConcurrency(tenant string) string { return k.tenantBase(tenant) + "xconc" }

// reservation is the key of a reservation's record (a hash: estimate n,
// and the state hash, counter field, mark and dirty set it adjusts).
func (k keyNames) reservation(tenant, id string) string { return k.tenantBase(tenant) + "rsv:" + id }

// leaseReturn is the key that marks a leased remainder given back (a
// string, kept leaseReturnTTL), so that a return retried after a lost
// reply is not refunded twice.
func (k keyNames) leaseReturn(tenant, id string) string { return k.tenantBase(tenant) + "lr:" + id }

func (k keyNames) refusalBase(tenant string) string { return k.tenantBase(tenant) + "rf:" }

// invalidations is the pub/sub channel on which snapshot changes are
// announced as "<tenant>:<version>".
func (k keyNames) invalidations() string { return k.prefix + ":ent:inval" }

// Dirty marks: the decision script notes each tenant whose usage or
// refusal counts grew in a small "dirty" structure, so that Tollgate's
// worker finds what to flush by popping marks, with work that grows with
// activity instead of a SCAN of the whole keyspace. In a Redis Cluster a
// script may only touch its own slot, so there is one dirty structure per
// slot, named with a hash tag chosen to land in that slot; elsewhere (one
// node, a Ring, where the script writes on the tenant's node) one per node.
//
//	<p>:dirty:q    set of counter marks (keyNames.mark) with unflushed usage
//	<p>:dirty:rf   sorted set of refusal hash names, scored by refusals added
//
// (in a Cluster: <p>:{<slot tag>}:dirty:q and :dirty:rf).

// limits is the key of the tenant's limits hash, which the decision
// script reads for a tenant missing from the near-cache (see refLua).
func (k keyNames) limits(tenant string) string { return k.tenantBase(tenant) + "lim" }

// dirtyBase returns the dirty structures' common prefix for tenant.
func (k keyNames) dirtyBase(tenant string) string {
	if !k.cluster {
		return k.prefix + ":dirty:"
	}
	return k.prefix + ":{" + slotTag(slot("t:"+tenant)) + "}:dirty:"
}

// slot is the Redis Cluster slot of a hash tag's content (CRC16/XMODEM
// mod 16384).
func slot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

var (
	slotTagsOnce sync.Once
	slotTags     [16384]string
)

// slotTag returns a short hash tag content whose slot is slot (0-16383):
// "d" followed by the smallest base-36 number that lands there. Tollgate's
// worker names the per-slot dirty structures with the same function.
func slotTag(n int) string {
	slotTagsOnce.Do(func() {
		left := len(slotTags)
		for i := 0; left > 0; i++ {
			tag := "d" + strconv.FormatInt(int64(i), 36)
			if s := slot(tag); slotTags[s] == "" {
				slotTags[s] = tag
				left--
			}
		}
	})
	return slotTags[n&16383]
}
