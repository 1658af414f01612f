// Package keyspace is the protocol between Tollgate's server and the
// limiter: the Redis key layout, the hash fields, the Cluster slot tags of
// the dirty marks and the pub/sub messages. The limiter (package limiter)
// and Tollgate's server (internal/limitstore) both name their keys here, so
// the layout is written once.
//
// It is not for backends: a backend decides with package limiter and never
// reads these keys. Its API may change in any release of the limiter
// module, with the server and the limiter changed together.
package keyspace

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultPrefix is the key prefix of Tollgate's own processes and the
// limiter's default.
const DefaultPrefix = "tg"

// Keys names the Redis keys of one prefix. Every key of one tenant carries
// the hash tag {t:<tenant>}, so that one decision script touches a single
// Redis Cluster slot, while different tenants spread over all slots.
type Keys struct {
	// Prefix starts every key; "" means DefaultPrefix.
	Prefix string
	// Cluster names the dirty marks per slot (see DirtyPending): a script
	// on a Redis Cluster may only touch its own slot.
	Cluster bool
}

// Base is the prefix in use ("" means DefaultPrefix).
func (k Keys) Base() string {
	if k.Prefix == "" {
		return DefaultPrefix
	}
	return k.Prefix
}

// TenantBase returns "<p>:{t:<tenant>}:", the start of every key of the
// tenant.
func (k Keys) TenantBase(tenant string) string {
	return k.Base() + ":{t:" + tenant + "}:"
}

// Snapshot is the key of the tenant's entitlement snapshot (JSON of
// limiter.Snapshot).
func (k Keys) Snapshot(tenant string) string { return k.TenantBase(tenant) + "ent" }

// Limits is the key of the tenant's limits hash, which the limiter writes
// from the snapshot for its decisions by reference (the decision script
// reads it for a tenant missing from the near-cache); writing or deleting
// the snapshot deletes it.
func (k Keys) Limits(tenant string) string { return k.TenantBase(tenant) + "lim" }

// State is the key of the tenant's state hash: everything a decision reads
// and writes on every call lives in it, so that one HMGET and one HSET do
// the work:
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
//
// (see Counter for the fields of one period counter).
func (k Keys) State(tenant string) string { return k.TenantBase(tenant) + "st" }

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
	return k.TenantBase(tenant) + "qp:" + CounterOf(meter, periodStart).Suffix
}

// Concurrency is the key of the tenant's concurrency leases (a sorted set
// scored by lease expiry in milliseconds).
func (k Keys) Concurrency(tenant string) string { return k.TenantBase(tenant) + "conc" }

// Window is the key of a sliding-window limit of an explicit Limits.
func (k Keys) Window(tenant, name string, window time.Duration) string {
	return k.TenantBase(tenant) + "sw:" + name + ":" + strconv.FormatInt(window.Milliseconds(), 10)
}

// PlanWindow is the key of a plan window's counter (a hash: w the window
// index, floor(now/length) by Redis's clock; c its count; p, for a sliding
// window, the previous window's count): "pw:<name>:<length ms>" for a
// sliding window, "pf:…" for a fixed one, so that a window whose kind
// changes starts afresh, and apart from an explicit Limits' windows.
func (k Keys) PlanWindow(tenant, name string, length time.Duration, fixed bool) string {
	typ := "pw:"
	if fixed {
		typ = "pf:"
	}
	return k.TenantBase(tenant) + typ + name + ":" + strconv.FormatInt(length.Milliseconds(), 10)
}

// FixedWindow is the key of a fixed window of an explicit Limits (hash
// fields w and c, as PlanWindow's).
func (k Keys) FixedWindow(tenant, name string, length time.Duration) string {
	return k.TenantBase(tenant) + "fw:" + name + ":" + strconv.FormatInt(length.Milliseconds(), 10)
}

// ExplicitRate is the key of the hash holding the token bucket (field r,
// and x as in State) of an explicit Limits; it is kept apart from the
// tenant's plan bucket.
func (k Keys) ExplicitRate(tenant string) string { return k.TenantBase(tenant) + "xr" }

// ExplicitConcurrency is the key of the leases of an explicit Limits.
func (k Keys) ExplicitConcurrency(tenant string) string { return k.TenantBase(tenant) + "xconc" }

// Reservation is the key of a reservation's record (a hash: estimate n,
// and the state hash, counter field, mark and dirty set it adjusts).
func (k Keys) Reservation(tenant, id string) string { return k.TenantBase(tenant) + "rsv:" + id }

// PrefetchReturn is the key that marks a prefetched remainder given back (a
// string), so that a return retried after a lost reply is not refunded
// twice.
func (k Keys) PrefetchReturn(tenant, id string) string { return k.TenantBase(tenant) + "lr:" + id }

// Refusals is the key of the hash counting the tenant's refusals per policy
// on one UTC day.
func (k Keys) Refusals(tenant string, day time.Time) string {
	return k.RefusalBase(tenant) + day.UTC().Format("20060102")
}

// RefusalBase is the start of the tenant's refusal hashes (Refusals less
// the day).
func (k Keys) RefusalBase(tenant string) string { return k.TenantBase(tenant) + "rf:" }

// Instances is the sorted set of the limiters alive (members scored by the
// expiry of their heartbeat), whose count divides limits decided in process.
func (k Keys) Instances() string { return k.Base() + ":instances" }

// Invalidations is the pub/sub channel on which snapshot changes are
// announced, each message an Invalidation.
func (k Keys) Invalidations() string { return k.Base() + ":ent:inval" }

// Invalidation is the message announcing the tenant's snapshot at version
// ("<tenant>:<version>"); version -1 means the snapshot was deleted.
func Invalidation(tenant string, version int64) string {
	return tenant + ":" + strconv.FormatInt(version, 10)
}

// ParseInvalidation splits an Invalidation message; a missing or
// malformed version is -1 (invalidate whatever is cached).
func ParseInvalidation(msg string) (tenant string, version int64) {
	i := strings.LastIndexByte(msg, ':')
	if i < 0 {
		return msg, -1
	}
	v, err := strconv.ParseInt(msg[i+1:], 10, 64)
	if err != nil {
		return msg[:i], -1
	}
	return msg[:i], v
}

// Dirty marks: the decision script notes each tenant whose usage or
// refusal counts grew in a small "dirty" structure, so that Tollgate's
// worker finds what to flush by popping marks, with work that grows with
// activity instead of a SCAN of the whole keyspace. In a Redis Cluster a
// script may only touch its own slot, so there is one dirty structure per
// slot, named with a hash tag chosen to land in that slot; elsewhere (one
// node, a Ring, where the script writes on the tenant's node) one per node.
//
//	<p>:dirty:q    set of counter marks (Keys.Mark) with unflushed usage
//	<p>:dirty:rf   sorted set of refusal hash names, scored by refusals added
//
// (in a Cluster: <p>:{<slot tag>}:dirty:q and :dirty:rf).

// DirtyBase returns the dirty structures' common prefix for tenant.
func (k Keys) DirtyBase(tenant string) string {
	if !k.Cluster {
		return k.Base() + ":dirty:"
	}
	return k.Base() + ":{" + SlotTag(Slot("t:"+tenant)) + "}:dirty:"
}

// DirtyPending is the set of counter marks (Keys.Mark) of tenant's slot.
func (k Keys) DirtyPending(tenant string) string { return k.DirtyBase(tenant) + "q" }

// DirtyRefusals is the sorted set of refusal hash names of tenant's slot.
func (k Keys) DirtyRefusals(tenant string) string { return k.DirtyBase(tenant) + "rf" }

// AllDirty returns every dirty structure name with the given suffix ("q"
// or "rf"): one, or one per slot on a Cluster.
func (k Keys) AllDirty(suffix string) []string {
	if !k.Cluster {
		return []string{k.Base() + ":dirty:" + suffix}
	}
	out := make([]string, 16384)
	for i := range out {
		out[i] = k.Base() + ":{" + SlotTag(i) + "}:dirty:" + suffix
	}
	return out
}

// Slot is the Redis Cluster slot of a hash tag's content (CRC16/XMODEM
// mod 16384).
func Slot(tag string) int {
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

// SlotTag returns a short hash tag content whose slot is n (0-16383): "d"
// followed by the smallest base-36 number that lands there.
func SlotTag(n int) string {
	slotTagsOnce.Do(func() {
		left := len(slotTags)
		for i := 0; left > 0; i++ {
			tag := "d" + strconv.FormatInt(int64(i), 36)
			if s := Slot(tag); slotTags[s] == "" {
				slotTags[s] = tag
				left--
			}
		}
	})
	return slotTags[n&16383]
}
