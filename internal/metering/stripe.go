package metering

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/billing/meterevent"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/internal/tracing"
)

// MeterEvent is one usage report to a Stripe Billing Meter.
type MeterEvent struct {
	EventName  string
	Identifier string // our idempotency key; Stripe drops a repeat within 24 hours
	Customer   string // stripe_customer_id
	Value      int64
	Timestamp  time.Time
}

// MeterSender sends meter events; the Stripe one in production, a fake in
// tests that need Stripe to fail.
type MeterSender interface {
	SendMeterEvent(ctx context.Context, ev MeterEvent) error
}

type stripeSender struct{ c meterevent.Client }

// NewStripeMeterSender sends through stripe-go's billing/meterevent with a
// client of its own; base overrides Stripe's API URL (stripe-mock in tests).
func NewStripeMeterSender(key, base string) MeterSender {
	cfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Timeout: 20 * time.Second, Transport: tracing.Transport(nil)},
		MaxNetworkRetries: stripe.Int64(2),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if base != "" {
		cfg.URL = stripe.String(strings.TrimRight(base, "/"))
	}
	return stripeSender{c: meterevent.Client{B: stripe.GetBackendWithConfig(stripe.APIBackend, cfg), Key: key}}
}

func (s stripeSender) SendMeterEvent(ctx context.Context, ev MeterEvent) error {
	p := &stripe.BillingMeterEventParams{
		EventName:  stripe.String(ev.EventName),
		Identifier: stripe.String(ev.Identifier),
		Payload:    map[string]string{"stripe_customer_id": ev.Customer, "value": strconv.FormatInt(ev.Value, 10)},
		Timestamp:  stripe.Int64(ev.Timestamp.Unix()),
	}
	p.Context = ctx
	_, err := s.c.New(p)
	return err
}

// ReportStats counts what one reporting pass did.
type ReportStats struct {
	Created   int // new reports recorded (pending) for usage not reported yet
	Sent      int // reports Stripe accepted in this pass (new or retried)
	Duplicate int // of Sent: Stripe already had the identifier (a send whose answer was lost)
	Failed    int // reports that failed in this pass (kept for a retry)
	Late      int // of Sent: usage past its period's invoice window, billed now
	Skipped   int // windows whose included quota could not be read (retried next pass)
	// Busy: another reporter's pass was running; this one did nothing.
	Busy bool
}

// resendWindow is how long a report of unknown outcome may be sent again
// under the same identifier: Stripe drops repeated identifiers only within
// a rolling 24 hours, so after that a resend could bill twice.
const resendWindow = 23 * time.Hour

// reportLockKey names the advisory lock that lets one reporter at a time
// record new reports (two would compute the same delta twice).
const reportLockKey = "tollgate:metering_stripe_report"

// reportPassKey names the session advisory lock held for a whole pass, so
// that one pass runs at a time across all workers and ReportRate is the
// rate Stripe sees, not a rate per process.
const reportPassKey = "tollgate:metering_stripe_report_pass"

// claimBatch is how many reports one claim takes.
const claimBatch = 500

// IsDuplicateIdentifier reports whether err is Stripe's answer to a meter
// event whose identifier it already has: HTTP 400 invalid_request_error
// "An event already exists with identifier …". The event was recorded
// (by an earlier send whose answer was lost), so it counts as sent.
func IsDuplicateIdentifier(err error) bool {
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusBadRequest {
		return false
	}
	return strings.Contains(strings.ToLower(se.Msg), "already exists with identifier") ||
		se.Code == stripe.ErrorCodeResourceAlreadyExists
}

// reportTarget is one (tenant, meter, window) with a Stripe meter.
type reportTarget struct {
	tenant, meter, event, kind string
	start, end                 time.Time
	used, planLimit            int64
	reported, n                int64
}

// ReportToStripe reports the usage of every meter whose plan quota has a
// stripe_meter_event, for tenants linked to a Stripe customer, in windows
// Stripe still accepts events for (35 days). What is reported is the
// overage above the included quota (stripe_report "overage", the default:
// the included quota is the tenant's entitlement, so overrides count) or
// all usage ("total"), as cumulative deltas: each report is the growth of
// that figure since the reports before it.
//
// One pass runs at a time across all workers (a session advisory lock; a
// second pass returns Busy at once), so ReportRate is what Stripe sees.
// One pass: (1) under an advisory lock (one recorder at a time), record
// each new delta in stripe_meter_reports as pending BEFORE sending, with an
// identifier <tenant>:<meter>:<window start unix>:<seq> fixed by the number
// of earlier reports of that window; (2) claim pending and failed reports
// (FOR UPDATE SKIP LOCKED plus a lease, so concurrent reporters never send
// the same row) and send them in parallel within ReportRate; (3) mark them
// sent (Stripe's duplicate-identifier 400 included) or failed. A report is
// timestamped inside its window while the window's invoice is open (until
// the billing period's end plus InvoiceGrace); later it is timestamped now,
// billed in the current period and marked late. Failed ones are sent again
// under the same identifier within resendWindow and otherwise left failed
// for a human, never re-reported under a new one.
func (s *Service) ReportToStripe(ctx context.Context, sender MeterSender) (ReportStats, error) {
	var st ReportStats
	release, ok, err := s.passLock(ctx)
	if err != nil {
		return st, err
	}
	if !ok {
		st.Busy = true
		s.log.DebugContext(ctx, "another stripe report pass is running")
		return st, nil
	}
	defer release()
	if err := s.recordReports(ctx, &st); err != nil {
		return st, err
	}
	if err := s.sendReports(ctx, sender, &st); err != nil {
		return st, err
	}
	now := s.opts.Now()
	// Reports of unknown outcome past the window: never resent.
	if _, err := s.db.Exec(ctx, `
UPDATE stripe_meter_reports SET status = 'failed', claimed_until = NULL,
       last_error = coalesce(last_error || '; ', '') || 'not resent: older than Stripe''s 24h identifier window, check Stripe'
 WHERE status = 'pending' AND created_at <= $1`, now.Add(-resendWindow)); err != nil {
		return st, fmt.Errorf("metering: stripe report: %w", err)
	}
	return st, nil
}

// passLock takes the pass-wide session advisory lock on a connection of
// its own; ok is false when another pass holds it. release unlocks, and
// closes the connection if unlocking failed: a pooled connection that
// still held the lock would block every later pass of this process.
func (s *Service) passLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("metering: stripe report lock: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, reportPassKey).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("metering: stripe report lock: %w", err)
		}
		return nil, false, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var unlocked bool
		if err := conn.QueryRow(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, reportPassKey).Scan(&unlocked); err != nil || !unlocked {
			s.log.WarnContext(uctx, "stripe report lock not released; dropping its connection", "err", err)
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, true, nil
}

// recordReports records a pending report for every window whose reportable
// figure grew, under a transaction-scoped advisory lock: a second reporter
// finds the lock taken and records nothing (the first records it all).
func (s *Service) recordReports(ctx context.Context, st *ReportStats) error {
	now := s.opts.Now()
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("metering: stripe report: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`, reportLockKey).Scan(&locked); err != nil {
		return fmt.Errorf("metering: stripe report lock: %w", err)
	}
	if !locked {
		s.log.DebugContext(ctx, "another reporter is recording stripe reports")
		return nil
	}
	rows, err := tx.Query(ctx, `
SELECT up.tenant_id, up.meter, up.period_start, up.period_end, q.stripe_meter_event, q.stripe_report,
       up.used, q.quota_limit, coalesce(r.reported, 0), coalesce(r.n, 0)
  FROM usage_periods up
  JOIN tenant_reported_quotas q ON q.tenant_id = up.tenant_id AND q.meter = up.meter
  LEFT JOIN LATERAL (SELECT sum(quantity) AS reported, count(*) AS n FROM stripe_meter_reports mr
                      WHERE mr.tenant_id = up.tenant_id AND mr.meter = up.meter AND mr.period_start = up.period_start) r ON true
 WHERE up.period_end > $1 AND up.used > coalesce(r.reported, 0)
 ORDER BY up.tenant_id, up.meter, up.period_start`, now.Add(-35*24*time.Hour))
	if err != nil {
		return fmt.Errorf("metering: stripe report: %w", err)
	}
	var todos []reportTarget
	var t reportTarget
	if _, err := pgx.ForEachRow(rows, []any{&t.tenant, &t.meter, &t.start, &t.end, &t.event, &t.kind, &t.used, &t.planLimit, &t.reported, &t.n}, func() error {
		todos = append(todos, t)
		return nil
	}); err != nil {
		return fmt.Errorf("metering: stripe report: %w", err)
	}
	included := map[string]map[string]int64{} // tenant → meter → limit; nil map = unreadable
	for _, t := range todos {
		target := t.used
		if t.kind != ReportTotal {
			limit, ok := s.includedQuota(ctx, included, t)
			if !ok {
				st.Skipped++
				continue
			}
			target = max(t.used-limit, 0)
		}
		if target > 0 && s.opts.Prepaid != nil {
			// Units a prepaid grant covered were paid for already.
			prepaid, err := s.opts.Prepaid(ctx, t.tenant, t.meter, t.start)
			if err != nil {
				s.log.WarnContext(ctx, "stripe report: prepaid units unreadable, skipped this pass", "tenant_id", t.tenant, "meter", t.meter, "err", err)
				st.Skipped++
				continue
			}
			target = max(target-prepaid, 0)
		}
		delta := target - t.reported
		if delta <= 0 {
			continue
		}
		id := reportID(t.tenant, t.meter, t.start, t.n+1)
		tag, err := tx.Exec(ctx, `
INSERT INTO stripe_meter_reports (identifier, tenant_id, meter, event_name, period_start, quantity, stripe_report, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (identifier) DO NOTHING`, id, t.tenant, t.meter, t.event, t.start, delta, t.kind, now)
		if err != nil {
			return fmt.Errorf("metering: stripe report: %w", err)
		}
		st.Created += int(tag.RowsAffected())
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("metering: stripe report: %w", err)
	}
	return nil
}

// ReportTotal is plan_quotas.stripe_report for sending all usage;
// anything else ("overage") sends usage above the included quota.
const ReportTotal = "total"

// includedQuota is the tenant's quota for the meter: the entitlement
// snapshot's (plan, overrides and whatever else the entitlements add), or
// the plan's limit when the service has no snapshot function. A snapshot
// that cannot be read skips the tenant for this pass: guessing could bill
// units the tenant paid for.
func (s *Service) includedQuota(ctx context.Context, cache map[string]map[string]int64, t reportTarget) (int64, bool) {
	if s.opts.Snapshot == nil {
		return t.planLimit, true
	}
	qs, seen := cache[t.tenant]
	if !seen {
		snap, err := s.opts.Snapshot(ctx, t.tenant)
		if err != nil {
			s.log.WarnContext(ctx, "stripe report: tenant's quota unreadable, skipped this pass", "tenant_id", t.tenant, "err", err)
			cache[t.tenant] = nil
			return 0, false
		}
		qs = make(map[string]int64, len(snap.Quotas))
		for m, q := range snap.Quotas {
			qs[m] = q.Limit
		}
		cache[t.tenant] = qs
	}
	if qs == nil {
		return 0, false
	}
	limit, ok := qs[t.meter]
	if !ok {
		// The entitlement has no quota for the meter (unlimited): none
		// of its usage is over a quota.
		return math.MaxInt64, true
	}
	return limit, true
}

// claimed is one report claimed for sending.
type claimed struct {
	ev                     MeterEvent
	tenant                 string
	windowEnd, invoiceOpen time.Time
}

// sendReports claims and sends until nothing claimable is left.
func (s *Service) sendReports(ctx context.Context, sender MeterSender, st *ReportStats) error {
	tried := []string{} // never nil: NOT (x = ANY(NULL)) would claim nothing
	for {
		batch, err := s.claimReports(ctx, tried)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		for _, c := range batch {
			tried = append(tried, c.ev.Identifier)
		}
		if err := s.sendBatch(ctx, sender, batch, st); err != nil {
			return err
		}
		if len(batch) < claimBatch {
			return nil
		}
	}
}

// claimReports leases up to claimBatch unsent reports to this reporter:
// rows locked by another claim are skipped, and a lease not yet expired
// (another reporter is sending them) keeps them out.
func (s *Service) claimReports(ctx context.Context, tried []string) ([]claimed, error) {
	now := s.opts.Now()
	rows, err := s.db.Query(ctx, `
WITH c AS (
  SELECT identifier FROM stripe_meter_reports
   WHERE status IN ('pending', 'failed') AND created_at > $1
     AND (claimed_until IS NULL OR claimed_until <= $2)
     AND NOT (identifier = ANY($4))
   ORDER BY created_at, identifier
   LIMIT $5
   FOR UPDATE SKIP LOCKED)
UPDATE stripe_meter_reports r SET claimed_until = $3
  FROM c, tenant_accounts t, usage_periods up
 WHERE r.identifier = c.identifier AND t.tenant_id = r.tenant_id AND t.stripe_customer_id IS NOT NULL
   AND up.tenant_id = r.tenant_id AND up.meter = r.meter AND up.period_start = r.period_start
RETURNING r.identifier, r.event_name, t.stripe_customer_id, r.quantity, r.tenant_id, r.period_start, up.period_end`,
		now.Add(-resendWindow), now, now.Add(s.opts.ReportLease), tried, claimBatch)
	if err != nil {
		return nil, fmt.Errorf("metering: claim stripe reports: %w", err)
	}
	var out []claimed
	var c claimed
	var start time.Time
	if _, err := pgx.ForEachRow(rows, []any{&c.ev.Identifier, &c.ev.EventName, &c.ev.Customer, &c.ev.Value, &c.tenant, &start, &c.windowEnd}, func() error {
		out = append(out, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("metering: claim stripe reports: %w", err)
	}
	// The invoice of a window is open until its billing period ends plus
	// Stripe's grace: the subscription's period when it holds the window
	// (a month of a yearly price bills at the year's end), else the window.
	subs := map[string]*period.Period{}
	for i := range out {
		c := &out[i]
		sub, ok := subs[c.tenant]
		if !ok {
			tp, err := loadTenantPeriods(ctx, s.db, c.tenant)
			if err == nil {
				sub = tp.sub
			}
			subs[c.tenant] = sub
		}
		end := c.windowEnd
		if sub != nil && !c.windowEnd.After(sub.End) && c.windowEnd.After(sub.Start) {
			end = sub.End
		}
		c.invoiceOpen = end.Add(s.opts.InvoiceGrace)
	}
	return out, nil
}

// sendBatch sends the claimed reports in parallel (at most ReportConcurrency
// at once, at most ReportRate per second) and records each outcome.
func (s *Service) sendBatch(ctx context.Context, sender MeterSender, batch []claimed, st *ReportStats) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.ReportConcurrency)
	for _, c := range batch {
		if err := s.reportRate.Wait(gctx); err != nil {
			break // ctx ended; g.Wait reports it
		}
		g.Go(func() error {
			now := s.opts.Now()
			ev := c.ev
			late := false
			// Inside the window it bills, and never in Stripe's future.
			ev.Timestamp = c.windowEnd.Add(-time.Second)
			if now.Before(ev.Timestamp) {
				ev.Timestamp = now
			}
			if !now.Before(c.invoiceOpen) {
				// Its invoice is final: bill it in the current period.
				ev.Timestamp, late = now, true
			}
			err := sender.SendMeterEvent(gctx, ev)
			dup := err != nil && IsDuplicateIdentifier(err)
			if err != nil && !dup {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				mu.Lock()
				st.Failed++
				mu.Unlock()
				s.log.WarnContext(gctx, "stripe meter event failed", "identifier", ev.Identifier, "err", err)
				if _, err := s.db.Exec(gctx, `UPDATE stripe_meter_reports SET status = 'failed', attempts = attempts + 1, last_error = $2, claimed_until = NULL WHERE identifier = $1`,
					ev.Identifier, truncate(err.Error(), 1000)); err != nil {
					return fmt.Errorf("metering: stripe report: %w", err)
				}
				return nil
			}
			note := ""
			if dup {
				note = "Stripe already had this identifier (an earlier send got through): counted as sent"
			}
			if late {
				s.log.WarnContext(gctx, "usage reported after its period's invoice window: billed in the current period", "identifier", ev.Identifier)
			}
			if _, err := s.db.Exec(gctx, `
UPDATE stripe_meter_reports SET status = 'sent', attempts = attempts + 1, last_error = nullif($4, ''), sent_at = $2,
       event_time = $3, late = $5, claimed_until = NULL
 WHERE identifier = $1`, ev.Identifier, now, ev.Timestamp, note, late); err != nil {
				return fmt.Errorf("metering: stripe report: %w", err)
			}
			mu.Lock()
			defer mu.Unlock()
			st.Sent++
			if dup {
				st.Duplicate++
			}
			if late {
				st.Late++
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// maxIdentifier is the longest identifier Stripe accepts for a meter event.
const maxIdentifier = 100

// reportID is the identifier of the seq-th report of a tenant's meter in
// the period starting at start. A meter name too long for Stripe's limit
// is replaced by a hash of it, so the identifier stays deterministic.
func reportID(tenant, meter string, start time.Time, seq int64) string {
	id := fmt.Sprintf("%s:%s:%d:%d", tenant, meter, start.Unix(), seq)
	if len(id) > maxIdentifier {
		sum := sha256.Sum256([]byte(meter))
		id = fmt.Sprintf("%s:h%x:%d:%d", tenant, sum[:8], start.Unix(), seq)
	}
	return id
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// StripeReportArgs reports usage to Stripe Billing Meters.
type StripeReportArgs struct{}

// Kind names the job in River's table.
func (StripeReportArgs) Kind() string { return "metering_stripe_report" }

// StripeReportWorker runs StripeReportArgs.
type StripeReportWorker struct {
	river.WorkerDefaults[StripeReportArgs]
	Service *Service
	Sender  MeterSender
}

// Work reports; a pass with failed sends fails the job so River shows it,
// though the next periodic pass retries them anyway.
func (w *StripeReportWorker) Work(ctx context.Context, _ *river.Job[StripeReportArgs]) error {
	st, err := w.Service.ReportToStripe(ctx, w.Sender)
	if err != nil {
		return err
	}
	if st.Failed > 0 {
		return errors.New("metering: some stripe meter events failed; they are retried")
	}
	return nil
}

// StripeReportPeriodic schedules StripeReportArgs every minute.
func StripeReportPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Minute),
		func() (river.JobArgs, *river.InsertOpts) { return StripeReportArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "metering_stripe_report"})
}
