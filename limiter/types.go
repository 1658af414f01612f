package limiter

import (
	"context"
	"time"
)

// Snapshot is the tenant's entitlement snapshot. Tollgate's server writes it
// to Redis as JSON and announces changes; the limiter reads it through its
// near-cache, or asks Options.Loader (e.g. remote.Client.Snapshot) for one
// missing from Redis. Its JSON form is also what Tollgate's API returns from
// GET /service/v1/tenants/{id}/snapshot.
type Snapshot struct {
	TenantID string `json:"tenant_id"`
	Plan     string `json:"plan"`
	Status   string `json:"status"` // active, trialing, past_due, grace, canceled, ...
	Version  int64  `json:"version"`
	// PlanVersion is the version of the plan whose limits these are (a
	// grandfathered tenant keeps an older one); 0 when not known.
	PlanVersion int64            `json:"plan_version,omitempty"`
	Rate        *Rate            `json:"rate,omitempty"`        // nil = unlimited
	Concurrency int64            `json:"concurrency,omitempty"` // 0 = unlimited
	Quotas      map[string]Quota `json:"quotas,omitempty"`      // meter -> quota
	// Windows are the plan's window limits ("5,000 an hour"), checked next
	// to the rate in the same decision: like the token bucket they count
	// every decision's cost, whatever its meter.
	Windows []Window `json:"windows,omitempty"`
	// Notify are, per meter, the thresholds whose crossing Tollgate's
	// flush reports (quota.threshold webhooks); decisions never read them.
	// A meter absent has the server's default (80% and 100%).
	Notify      map[string][]QuotaThreshold `json:"notify,omitempty"`
	Features    []string                    `json:"features,omitempty"`
	PeriodStart time.Time                   `json:"period_start"`
	PeriodEnd   time.Time                   `json:"period_end"`
	// NextPeriodEnd is the end of the period after this one, so that a
	// request after PeriodEnd rolls over without waiting for the server.
	NextPeriodEnd time.Time `json:"next_period_end"`
	// PrevPeriodStart is the start of the period before this one (zero if
	// unknown), so that a snapshot whose writer's clock ran ahead (its
	// period has not begun by Redis's clock) is decided in the period
	// Redis is in, never by an early reset.
	PrevPeriodStart time.Time `json:"prev_period_start,omitempty"`
}

// Rate is a token bucket: Burst tokens of capacity, refilled at PerSecond.
type Rate struct {
	PerSecond float64 `json:"per_second"`
	Burst     int64   `json:"burst"`
}

// QuotaMode says what a period quota does at its limit.
type QuotaMode string

// Quota modes.
const (
	ModeHard QuotaMode = "hard" // refuse a request that would go over the limit
	ModeSoft QuotaMode = "soft" // admit and count; the overage is reported elsewhere
)

// Quota is a period quota of one meter.
type Quota struct {
	Limit int64     `json:"limit"`
	Mode  QuotaMode `json:"mode"` // ModeHard or ModeSoft; "" means hard
}

// QuotaThreshold is a line in a quota: Percent of its limit, or Units
// (exactly one is set).
type QuotaThreshold struct {
	Percent int   `json:"percent,omitempty"`
	Units   int64 `json:"units,omitempty"`
}

// Limits are explicit limits a backend defines itself (per IP, per endpoint,
// before authentication), used instead of the tenant's snapshot. The "tenant"
// given to Allow is then any key the backend chooses (e.g. "ip:192.0.2.1");
// explicit limits keep their state apart from plan limits of a tenant of the
// same name.
type Limits struct {
	Rate        *Rate    // nil = no token bucket
	Concurrency int64    // 0 = no concurrency limit
	Windows     []Window // sliding windows
}

// Window is a window limit: at most Limit units per Length. A sliding
// window (the default) counts any Length, estimated from two fixed windows
// weighted by overlap; a fixed one counts from Redis time's multiples of
// Length (floor(now/Length)·Length) and resets at the next.
type Window struct {
	Name   string        `json:"name"`  // policy name in decisions and headers, e.g. "auth-failures"
	Limit  int64         `json:"limit"` // units per Length
	Length time.Duration `json:"-"`     // at least 1ms; JSON length_ms
	Kind   WindowKind    `json:"kind,omitempty"`
}

// WindowKind says how a Window counts.
type WindowKind string

// Window kinds.
const (
	WindowSliding WindowKind = "sliding" // two fixed windows weighted by overlap ("" too)
	WindowFixed   WindowKind = "fixed"   // a counter that resets every Length
)

// Request describes what one decision takes.
type Request struct {
	// Cost is the number of tokens and quota units taken; 0 means 1, so
	// that a forgotten Cost still enforces the limits.
	Cost int64
	// Peek asks whether a request of Cost would be admitted without taking
	// anything (no token, no quota unit, no concurrency slot, no refusal
	// counted).
	Peek bool
	// Meter is the quota meter; "" means "requests". A meter for which the
	// snapshot has no quota is unlimited: allowed and not counted.
	Meter string
	// Concurrency takes a concurrency slot (when the tenant has a
	// concurrency limit); give it back with Decision.Release.
	Concurrency bool
	// SkipQuota checks the rate (and concurrency) only, not the period quota.
	SkipQuota bool
	// Limits replaces the tenant's snapshot with explicit limits; nil uses
	// the snapshot.
	Limits *Limits
	// Reserve holds Cost as an estimate, for a cost known only afterwards:
	// decided (and refused) like any request, the admitted Decision carries
	// a Reservation to Settle with the actual cost or to Cancel. One never
	// settled expires after Options.ReservationTTL, charged at its
	// estimate. A decision made by the fail modes (Redis down) carries no
	// Reservation.
	Reserve bool

	// leaseTake marks the leased mode's take of a chunk (leased.go): its
	// refusal is not counted as a refused request.
	leaseTake bool
}

// Policy names used in decisions.
const (
	PolicyRate        = "rate"
	PolicyConcurrency = "concurrency"
	DefaultMeter      = "requests"
)

// unitConcurrent is PolicyStatus.Unit of a concurrency policy (limithttp
// names it in RateLimit-Policy).
const unitConcurrent = "concurrent-requests"

// Decision is the outcome of Allow. A refusal is a Decision with Allowed
// false, never an error.
type Decision struct {
	Allowed bool
	Plan    string
	// Policy is the policy that refused ("rate", a meter name such as
	// "requests", "concurrency", or a Window's name); "" when allowed. In
	// shadow mode it names the policy that would have refused.
	Policy string
	// RetryAfter, on a refusal, is when to try again: at least the refusing
	// policy's Reset.
	RetryAfter time.Duration
	// Policies has one entry per policy checked, in header order: rate,
	// windows, quota, concurrency.
	Policies []PolicyStatus
	// Fallback is "" when Redis decided (the normal case). When Redis did
	// not answer and the fail modes decided, it is FailLocal if at least
	// one policy was decided in process (its limit divided among the
	// instances alive), else FailOpen (at least one policy was allowed
	// without being checked: fail mode open, or a soft quota in fail mode
	// local).
	Fallback FailMode
	// Shadow is true in shadow mode when the request would have been refused
	// and was allowed.
	Shadow bool

	// Reservation is set on an admitted decision of a Request with Reserve.
	Reservation *Reservation

	lease *lease
	rsv   *rsvTarget
}

// PolicyStatus is the state of one policy after a decision.
type PolicyStatus struct {
	Name      string
	Limit     int64         // burst, quota limit, window limit or concurrency limit
	Window    time.Duration // bucket refill time (burst/per_second), period length, window length; 0 for concurrency
	Remaining int64         // units left after this decision (never negative)
	Reset     time.Duration // until the units can be used again (refused) or are all back (allowed)
	Unit      string        // "" or "concurrent-requests" (a concurrency policy)
	Mode      QuotaMode     // ModeHard or ModeSoft for quotas; "" otherwise
}

// Release gives the concurrency slot of the decision back. It is a no-op for
// a decision without a slot and safe to call more than once.
func (d *Decision) Release(ctx context.Context) error {
	if d == nil || d.lease == nil {
		return nil
	}
	return d.lease.release(ctx)
}
