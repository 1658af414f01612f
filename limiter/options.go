package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// FailMode says what a policy does when Redis cannot be reached within
// Options.Timeout. The zero value ("") picks the policy's default
// (FailLocal for rate and windows, FailOpen for quotas and concurrency).
type FailMode string

const (
	// FailOpen allows the request (reported in Decision.Fallback and the
	// OnFallback hook). It is the only mode that admits unchecked.
	FailOpen FailMode = "open"
	// FailClosed makes Allow return ErrUnavailable (HTTP 503).
	FailClosed FailMode = "closed"
	// FailLocal decides in process: rate and windows with an in-process token
	// bucket at the limit divided by the instances alive (at least
	// Options.ExpectedInstances), concurrency with an in-process count at
	// the limit divided likewise, a hard quota held to what is left divided
	// likewise (what Redis last said, else the limit less the durable usage
	// of Options.UsageLoader, else the limit), less what this process
	// admitted since; a soft quota is open. Quota units it admits are
	// counted and added to Redis once Redis answers. A tenant of which
	// nothing can be had (Redis and the Loader both failing) is refused
	// with ErrUnavailable for a request counting a meter.
	FailLocal FailMode = "local"
)

// FailModes sets the fail mode per policy.
type FailModes struct {
	Rate        FailMode // default FailLocal
	Quota       FailMode // default FailOpen
	Concurrency FailMode // default FailOpen
	Window      FailMode // default FailLocal
}

// SnapshotLoader returns the snapshot of a tenant missing from Redis. The
// server side's loader reads Postgres and writes the snapshot back. It returns
// ErrUnknownTenant (or an error wrapping it) for a tenant that does not exist.
type SnapshotLoader func(ctx context.Context, tenant string) (Snapshot, error)

// UsageLoader returns the durable usage of a meter in the period starting at
// periodStart; it is used to rebuild a quota counter missing from Redis.
type UsageLoader func(ctx context.Context, tenant, meter string, periodStart time.Time) (int64, error)

// Hooks are metrics callbacks. Every field is optional. Callbacks run on the
// deciding caller's goroutine or on the limiter's own invalidation
// subscriber (OnRedisError, OnInvalidation), so they must be fast and safe
// for concurrent use.
type Hooks struct {
	// OnDecision is called for every decision Allow returns.
	OnDecision func(tenant string, d *Decision)
	// OnRedisError is called when a Redis call fails or times out; op names
	// the call ("decide", "snapshot", "seed", "release", "subscribe").
	OnRedisError func(op string, err error)
	// OnLoaderError is called when Options.Loader fails for another reason
	// than an unknown tenant (e.g. Tollgate does not answer a Remote);
	// loader is "snapshot". The decision then follows the fail modes.
	OnLoaderError func(loader string, err error)
	// OnFallback is called when a fail mode decided a policy: mode is
	// "open", "closed" or "local".
	OnFallback func(policy string, mode FailMode)
	// OnCacheHit and OnCacheMiss count snapshot near-cache lookups.
	OnCacheHit  func()
	OnCacheMiss func()
	// OnRefusalCacheHit is called when a refusal was answered from the
	// local refusal cache without Redis.
	OnRefusalCacheHit func(policy string)
	// OnRedisWait is called after each Redis call the caller waited for:
	// queued is the wait for a connection slot in this process, wait the
	// call itself (Redis's answer, and the network).
	OnRedisWait func(op string, queued, wait time.Duration)
	// OnInvalidation is called for each invalidation received; all is true
	// when the whole cache was dropped (subscription lost or renewed).
	OnInvalidation func(tenant string, all bool)
}

// Options configure a Limiter. The zero value is usable: every field
// documents its default.
type Options struct {
	// Prefix starts every key; default "tg". It must match the server's.
	Prefix string
	// Loader is asked for a snapshot missing from Redis (Remote.Snapshot
	// outside Tollgate). Without one, a tenant without a snapshot gets
	// ErrUnknownTenant. When it fails (other than ErrUnknownTenant), the
	// fail modes decide: with the tenant's last known limits if this
	// process has them, else open (closed if the rate or quota fail mode
	// is closed: ErrUnavailable).
	Loader SnapshotLoader
	// ExternalLoader is asked for the tenant id of an external id whose
	// alias Redis lacks or cannot give (ExternalTenant), e.g.
	// remote.Client.ExternalTenant outside Tollgate; it returns
	// ErrUnknownTenant (or an error wrapping it) for an external id no
	// tenant has. Without one, such an external id is ErrUnknownTenant
	// (ErrUnavailable while Redis is unreachable).
	ExternalLoader func(ctx context.Context, externalID string) (tenantID string, err error)
	// UsageLoader rebuilds a missing quota counter from durable usage
	// (Remote.Usage outside Tollgate). Without one, a missing counter starts
	// at 0.
	UsageLoader UsageLoader
	// GrantLoader returns the tenant's grants (active and pending, every
	// meter, in draw order, each with the durable ledger's remaining), to
	// rebuild grants Redis lost (keyspace.Keys.PutGrants) before a
	// decision draws them: never free units, never units drawn twice. Inside
	// Tollgate it reads internal/credits. Without one, grants Redis lost are
	// not drawn until Tollgate writes them again (a hard quota refuses at
	// the included units).
	GrantLoader func(ctx context.Context, tenant string) ([]keyspace.Grant, error)
	// Timeout is how long a decision waits for Redis's answer; default
	// 50ms. It counts from when the call has a connection (the wait for a
	// free one is the process's queue: past Timeout the decision is shed
	// with ErrOverloaded, before anything was taken) and is extended while
	// the process itself is late (a deadline timer firing well past its
	// time: the goroutines waited for a CPU). A decision past it fails over
	// to its fail modes alone; its call is still read until 10 × Timeout
	// (at least 500ms), and a late answer is reconciled: units Redis took
	// for a request the fail mode refused are given back, units the fail
	// mode admitted that Redis also took are not counted twice. Redis as a
	// whole is judged down only on evidence: a refused, reset or closed
	// connection, or at least half of at least 20 calls in the last second
	// failing (3 failures in a row on a quieter instance).
	Timeout time.Duration
	// Cooldown is how often, while Redis is judged down, it is probed (a
	// PING within Timeout) before decisions trust it again; default 100ms.
	Cooldown time.Duration
	// FailMode per policy; see FailModes for the defaults.
	FailMode FailModes
	// ExpectedInstances is the least number of instances that limits
	// decided locally (FailLocal) are divided among; default 1. The
	// divisor is the instances alive by their heartbeats in Redis (each
	// Limiter refreshes its own every second while Redis answers) when
	// more are alive.
	ExpectedInstances int
	// CacheSize bounds the snapshot near-cache (entries); default 10000.
	CacheSize int
	// CacheTTL is the safety TTL after which a cached snapshot is read again
	// even without an invalidation; default 30s.
	CacheTTL time.Duration
	// Shadow decides and reports but never refuses: a would-be refusal is
	// returned allowed with Decision.Shadow set.
	Shadow bool
	// MaxInFlight caps the decisions in progress in this process; over it
	// Allow returns ErrOverloaded. 0 = no cap. With AdaptiveConcurrency it
	// is the adaptive limit's upper bound (0: 1000).
	MaxInFlight int
	// AdaptiveConcurrency bounds the decisions in progress by a limit that
	// follows their latency (a gradient limiter, as TCP Vegas): it grows
	// while latency holds and shrinks when decisions queue, and what is
	// over it gets ErrOverloaded at once, before any Redis work. Overload
	// is then shed instead of every decision waiting past Timeout and
	// falling to the fail modes. Default false (Tollgate's api turns it on).
	AdaptiveConcurrency bool
	// MaxCost is the largest Request.Cost accepted; default 1,000,000.
	// A larger cost is ErrInvalidRequest.
	MaxCost int64
	// LeaseTTL is how long a concurrency slot is held when its holder never
	// releases it (a crash); default 60s. Requests running longer lose their
	// slot to others after LeaseTTL.
	LeaseTTL time.Duration
	// ReservationTTL is how long a reservation (Request.Reserve) waits to
	// be settled or cancelled before it expires, charged at its estimate;
	// default 1h.
	ReservationTTL time.Duration
	// DisableRefusalCache turns off the local cache of refusals (by default
	// a refusal is answered locally until its retry time, at no Redis cost).
	DisableRefusalCache bool

	// generalScript sends every decision through decideBody, never the
	// common plan's fastBody (tests compare the two).
	generalScript bool
	// Batching opts into natural batching (group commit): a decision
	// finding no pipeline in flight is sent at once; decisions arriving
	// while one is in flight are sent together, as one pipeline, as soon as
	// it returns. Busy processes get more decisions per round trip, an idle
	// one pays no added wait (there is no collection window to tune).
	Batching bool
	// Prefetch opts into the prefetch mode: the Limiter takes tokens and
	// quota units from Redis in chunks (a decision whose cost is the chunk,
	// sized by the tenant's observed rate and bounded by a quarter of each
	// limit and of what is left, divided by ExpectedInstances) and decides
	// locally from them. What all instances admit together never exceeds a
	// limit. Unused quota units go back when a chunk expires (10s after its
	// last use on plentiful limits, 200ms after its take near a limit), on
	// an invalidation of the tenant and on Close; a crashed process strands
	// at most its chunks. Peeks, reservations, concurrency slots (leases)
	// and explicit Limits stay exact. It was named LocalLeases ("the leased
	// mode") before limiter/v0.1.0. Default false.
	Prefetch bool
	// MaxBatch bounds the decisions of one pipeline; default 128.
	MaxBatch int
	// Hooks are metrics callbacks.
	Hooks Hooks
}

func (o *Options) setDefaults() error {
	if o.Prefix == "" {
		o.Prefix = keyspace.DefaultPrefix
	}
	if o.Timeout == 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.Cooldown == 0 {
		o.Cooldown = 100 * time.Millisecond
	}
	if o.ExpectedInstances == 0 {
		o.ExpectedInstances = 1
	}
	if o.CacheSize == 0 {
		o.CacheSize = 10000
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = 30 * time.Second
	}
	if o.MaxCost == 0 {
		o.MaxCost = 1_000_000
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 60 * time.Second
	}
	if o.ReservationTTL == 0 {
		o.ReservationTTL = time.Hour
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 128
	}
	fm := &o.FailMode
	for _, p := range []struct {
		m   *FailMode
		def FailMode
		n   string
	}{{&fm.Rate, FailLocal, "Rate"}, {&fm.Quota, FailOpen, "Quota"}, {&fm.Concurrency, FailOpen, "Concurrency"}, {&fm.Window, FailLocal, "Window"}} {
		switch *p.m {
		case "":
			*p.m = p.def
		case FailOpen, FailClosed, FailLocal:
		default:
			return fmt.Errorf("limiter: FailMode.%s %q: use \"open\", \"closed\" or \"local\"", p.n, *p.m)
		}
	}
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("limiter: Timeout %v is negative; use 0 for the default 50ms", o.Timeout)
	case o.Cooldown < 0:
		return fmt.Errorf("limiter: Cooldown %v is negative", o.Cooldown)
	case o.ExpectedInstances < 0:
		return fmt.Errorf("limiter: ExpectedInstances %d is negative", o.ExpectedInstances)
	case o.CacheSize < 0:
		return fmt.Errorf("limiter: CacheSize %d is negative", o.CacheSize)
	case o.CacheTTL < 0:
		return fmt.Errorf("limiter: CacheTTL %v is negative", o.CacheTTL)
	case o.MaxInFlight < 0:
		return fmt.Errorf("limiter: MaxInFlight %d is negative; use 0 for no cap", o.MaxInFlight)
	case o.MaxCost < 0:
		return fmt.Errorf("limiter: MaxCost %d is negative", o.MaxCost)
	case o.ReservationTTL < time.Millisecond:
		return fmt.Errorf("limiter: ReservationTTL %v is under 1ms", o.ReservationTTL)
	case o.LeaseTTL < time.Millisecond:
		return fmt.Errorf("limiter: LeaseTTL %v is under 1ms", o.LeaseTTL)
	}
	return nil
}
