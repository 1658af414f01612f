// Package metering keeps usage exactly once: usage events sent by backends
// (inserted with their idempotency key and added to the period's durable
// meter in one statement), the limiter's Redis counters moved to Postgres
// by an idempotent flush, quota counters rebuilt from Postgres after a Redis
// loss, periods closed with their figures kept, hourly history, and usage
// reported to Stripe Billing Meters. See docs/metering.md for the rules.
package metering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
)

// GrantDraw is what one grant gave in one flushed claim.
type GrantDraw struct {
	FlushID     string // the claim's id
	GrantID     string
	PeriodStart time.Time
	Units       int64
}

// PrepaidFunc is what the tenant's prepaid grants (admin, top-up,
// rollover; not Stripe credits) gave of meter in the period starting at
// periodStart: units that are not overage.
type PrepaidFunc func(ctx context.Context, tenantID, meter string, periodStart time.Time) (int64, error)

// GrantDrawsFunc records grant draws in the flush's transaction.
type GrantDrawsFunc func(ctx context.Context, tx pgx.Tx, draws []GrantDraw) error

// SnapshotFunc returns a tenant's current entitlement snapshot (cmd wires
// the entitlements service's ReloadSnapshot); it gives GET /v1/usage its
// quotas and period.
type SnapshotFunc func(ctx context.Context, tenantID string) (limiter.Snapshot, error)

// Options configure a Service. Every field documents its default.
type Options struct {
	// Snapshot gives the tenant's quotas and period to Usage. Required for
	// Usage; Ingest and the flush do without it.
	Snapshot SnapshotFunc
	// Crossings, when set, is given the quota thresholds a flush crossed,
	// inside the flush's own transaction (cmd wires notify's outbox), so
	// an event exists exactly when its figures were committed. Needs
	// Limits (or Snapshot). Default nil: crossings are not looked for.
	Crossings CrossingsFunc
	// Exhausted, when set, is given the hard quotas that refused requests
	// in their current window, found by the refusals flush (every 10
	// flush intervals) in the transaction that stores the refusal counts
	// (cmd wires notify's quota.exhausted). Needs Limits (or Snapshot).
	// Default nil.
	Exhausted ExhaustedFunc
	// PeriodsClosed, when set, is given the windows ClosePeriods closed,
	// with each meter's final figure, in the transaction that closes them
	// (cmd wires notify's period.closed). Default nil.
	PeriodsClosed PeriodsClosedFunc
	// GrantDraws, when set, records what each grant gave in a flushed
	// claim, as Redis decided it, inside the flush's own transaction, under
	// the claim's id (cmd wires credits' RecordDrawsTx, idempotent per
	// flush id), so that usage and grant consumption commit together.
	// Default nil: grant draws in claims are not recorded (the claims still
	// are).
	GrantDraws GrantDrawsFunc
	// Prepaid, when set, takes the units prepaid grants covered off what
	// is billed: the Stripe report and GET /v1/usage's overage (cmd wires
	// credits' PrepaidConsumed). Units from Stripe credit grants stay
	// billed; Stripe applies the credit on the invoice. Default nil: grants
	// are not taken off (a deployment without credits has none).
	Prepaid PrepaidFunc
	// Grants, when set, gives GET /v1/usage each quota's active grants
	// (cmd wires credits' Balance), shown with included and available.
	// Default nil: usage shows no grants.
	Grants GrantsFunc
	// Limits gives the quotas crossings are measured against: the worker
	// wires entitlements' CachedSnapshot (the snapshot the limiter enforces, one
	// Redis read per flushed tenant, outside any lock but the flushed
	// rows'). Default Snapshot.
	Limits SnapshotFunc
	// Thresholds are the percentages of a quota whose crossing is
	// reported; default [80, 100].
	Thresholds []int
	// OnFlush, when set, is told the outcome of every pass of RunFlusher
	// (the worker's flush-lag metrics).
	OnFlush func(st FlushStats, err error)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// MaxEventAge is how old an event's timestamp may be; default 35 days,
	// the window in which Stripe Billing Meters still accept an event, so
	// everything we accept can still be reported.
	MaxEventAge time.Duration
	// MaxEventAhead is how far ahead of our clock a timestamp may be;
	// default 5 minutes (clock skew, as Stripe allows).
	MaxEventAhead time.Duration
	// CloseGrace is how long after its end a period is closed; default 1
	// minute, so that Redis-timed decisions of its last second are flushed.
	CloseGrace time.Duration
	// InvoiceGrace is how long after a billing period's end Stripe keeps
	// its invoice open to meter events timestamped in it; default 55
	// minutes (Stripe's default is 1 hour; 5 minutes are left for the
	// send). Later usage is reported into the current period, marked late.
	InvoiceGrace time.Duration
	// ReportConcurrency is how many meter events are sent at once;
	// default 8.
	ReportConcurrency int
	// ReportRate caps meter events sent per second; default 20, under
	// Stripe's test-mode limit of 25 requests a second (live mode allows
	// 1000 meter events a second).
	ReportRate float64
	// RedisTimeout bounds the Redis steps of a request: reading the live
	// counters of GET /v1/usage (all meters together) and adding ingested
	// usage to them; default 250ms. Postgres has the truth of both, so a
	// Redis that does not answer in time makes the figures stale, never the
	// request hang or fail.
	RedisTimeout time.Duration
	// ReportLease is how long a claimed report stays with its reporter
	// before another may send it; default 2 minutes.
	ReportLease time.Duration
}

// Service is the metering domain.
type Service struct {
	db    *pgxpool.Pool
	store *limitstore.Store
	log   *slog.Logger
	opts  Options
	// reportRate paces meter events across passes of this process.
	reportRate *rate.Limiter
}

// NewService returns the metering service on db and the limiter's Redis
// store.
func NewService(db *pgxpool.Pool, store *limitstore.Store, log *slog.Logger, opts Options) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Limits == nil {
		opts.Limits = opts.Snapshot
	}
	if opts.Thresholds == nil {
		opts.Thresholds = []int{80, 100}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxEventAge == 0 {
		opts.MaxEventAge = 35 * 24 * time.Hour
	}
	if opts.MaxEventAhead == 0 {
		opts.MaxEventAhead = 5 * time.Minute
	}
	if opts.CloseGrace == 0 {
		opts.CloseGrace = time.Minute
	}
	if opts.InvoiceGrace == 0 {
		opts.InvoiceGrace = 55 * time.Minute
	}
	if opts.ReportConcurrency <= 0 {
		opts.ReportConcurrency = 8
	}
	if opts.ReportRate <= 0 {
		opts.ReportRate = 20
	}
	if opts.RedisTimeout <= 0 {
		opts.RedisTimeout = 250 * time.Millisecond
	}
	if opts.ReportLease == 0 {
		opts.ReportLease = 2 * time.Minute
	}
	return &Service{db: db, store: store, log: log, opts: opts,
		reportRate: rate.NewLimiter(rate.Limit(opts.ReportRate), max(1, int(opts.ReportRate)/4))}
}

// tenantPeriods is what the period of any instant of a tenant depends on.
type tenantPeriods struct {
	anchor time.Time
	sub    *period.Period
	window period.Window // the tenant's plan's quota_window
}

func (tp tenantPeriods) at(t time.Time) period.Period {
	p := period.In(tp.window, tp.anchor, tp.sub, t)
	return period.Period{Start: secondOf(p.Start), End: secondOf(p.End)}
}

// endOf returns the end of the tenant's period starting at start. A start
// that the tenant's periods do not produce (its subscription changed since)
// gets a monthly period anchored on itself.
func (tp tenantPeriods) endOf(start time.Time) time.Time {
	if p := tp.at(start); p.Start.Equal(start) {
		return p.End
	}
	return secondOf(period.Monthly(start, start).End)
}

// loadTenantPeriods reads the anchor, the current period of the
// subscription the entitlement snapshot uses (a live one first, then the
// latest) and the quota window of the tenant's plan, the inputs of
// period.In: the same as the snapshot's, so durable meters and Redis
// counters agree on period (window) starts.
func loadTenantPeriods(ctx context.Context, q postgres.Querier, tenantID string) (tenantPeriods, error) {
	var tp tenantPeriods
	var start, end *time.Time
	err := q.QueryRow(ctx, `
SELECT period_anchor, current_period_start, current_period_end, quota_window
FROM tenant_accounts
WHERE tenant_id = $1`, tenantID).Scan(&tp.anchor, &start, &end, &tp.window)
	if errors.Is(err, pgx.ErrNoRows) {
		return tp, apperr.New(apperr.NotFound, "tenant %s not found", tenantID)
	}
	if err != nil {
		return tp, fmt.Errorf("metering: tenant periods: %w", err)
	}
	if start != nil && end != nil {
		tp.sub = &period.Period{Start: start.UTC(), End: end.UTC()}
	}
	return tp, nil
}

// secondOf is the key of a period start: the limiter names counters by
// Unix seconds, so every period start (and end) in metering is cut to the
// second, whatever precision the anchor was stored with.
func secondOf(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }
