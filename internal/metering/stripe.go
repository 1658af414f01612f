package metering

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/billing/meterevent"
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
		HTTPClient:        &http.Client{Timeout: 20 * time.Second},
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
	Created int // new reports recorded (pending) for usage not reported yet
	Sent    int // reports Stripe accepted in this pass (new or retried)
	Failed  int // reports that failed in this pass (kept for a retry)
}

// resendWindow is how long a report of unknown outcome may be sent again
// under the same identifier: Stripe drops repeated identifiers only within
// a rolling 24 hours, so after that a resend could bill twice.
const resendWindow = 23 * time.Hour

// ReportToStripe reports the usage of every meter whose plan quota has a
// stripe_meter_event, for tenants linked to a Stripe customer, in periods
// Stripe still accepts events for (35 days). Each report is recorded in
// stripe_meter_reports as pending BEFORE it is sent, with an identifier
// <tenant>:<meter>:<period start unix>:<seq> fixed by the number of earlier
// reports of that period, so two reporters (or a retry after a crash)
// produce the same row and the same identifier, and Stripe deduplicates
// the send. A report is marked sent or failed after the call; pending and
// failed ones are sent again (same identifier) within resendWindow and
// otherwise left failed for a human, never re-reported under a new one.
func (s *Service) ReportToStripe(ctx context.Context, sender MeterSender) (ReportStats, error) {
	var st ReportStats
	now := s.opts.Now()
	// 1. Record what is not reported yet, one report per (tenant, meter, period).
	type todo struct {
		tenant, meter, event string
		start, end           time.Time
		delta, n             int64
	}
	var todos []todo
	rows, err := s.db.Query(ctx, `
SELECT up.tenant_id, up.meter, up.period_start, up.period_end, q.stripe_meter_event,
       up.used - coalesce(r.reported, 0), coalesce(r.n, 0)
  FROM usage_periods up
  JOIN tenants t ON t.id = up.tenant_id AND t.stripe_customer_id IS NOT NULL
  JOIN plan_quotas q ON q.plan_key = t.plan_key AND q.meter = up.meter AND q.stripe_meter_event IS NOT NULL
  LEFT JOIN LATERAL (SELECT sum(quantity) AS reported, count(*) AS n FROM stripe_meter_reports mr
                      WHERE mr.tenant_id = up.tenant_id AND mr.meter = up.meter AND mr.period_start = up.period_start) r ON true
 WHERE up.period_end > $1 AND up.used > coalesce(r.reported, 0)`, now.Add(-35*24*time.Hour))
	if err != nil {
		return st, fmt.Errorf("metering: stripe report: %w", err)
	}
	var t todo
	if _, err := pgx.ForEachRow(rows, []any{&t.tenant, &t.meter, &t.start, &t.end, &t.event, &t.delta, &t.n}, func() error {
		todos = append(todos, t)
		return nil
	}); err != nil {
		return st, fmt.Errorf("metering: stripe report: %w", err)
	}
	for _, t := range todos {
		id := reportID(t.tenant, t.meter, t.start, t.n+1)
		tag, err := s.db.Exec(ctx, `
INSERT INTO stripe_meter_reports (identifier, tenant_id, meter, event_name, period_start, quantity)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (identifier) DO NOTHING`, id, t.tenant, t.meter, t.event, t.start, t.delta)
		if err != nil {
			return st, fmt.Errorf("metering: stripe report: %w", err)
		}
		st.Created += int(tag.RowsAffected())
	}

	// 2. Send every pending or failed report still inside the resend window.
	rows, err = s.db.Query(ctx, `
SELECT r.identifier, r.event_name, t.stripe_customer_id, r.quantity, r.period_start, up.period_end
  FROM stripe_meter_reports r
  JOIN tenants t ON t.id = r.tenant_id
  JOIN usage_periods up ON up.tenant_id = r.tenant_id AND up.meter = r.meter AND up.period_start = r.period_start
 WHERE r.status IN ('pending', 'failed') AND r.created_at > $1 AND t.stripe_customer_id IS NOT NULL
 ORDER BY r.created_at`, now.Add(-resendWindow))
	if err != nil {
		return st, fmt.Errorf("metering: stripe report: %w", err)
	}
	var evs []MeterEvent
	var ev MeterEvent
	var start, end time.Time
	if _, err := pgx.ForEachRow(rows, []any{&ev.Identifier, &ev.EventName, &ev.Customer, &ev.Value, &start, &end}, func() error {
		// Inside the period it bills, and never in Stripe's future.
		ev.Timestamp = end.Add(-time.Second)
		if now.Before(ev.Timestamp) {
			ev.Timestamp = now
		}
		evs = append(evs, ev)
		return nil
	}); err != nil {
		return st, fmt.Errorf("metering: stripe report: %w", err)
	}
	for _, ev := range evs {
		if err := sender.SendMeterEvent(ctx, ev); err != nil {
			if ctx.Err() != nil {
				return st, ctx.Err()
			}
			st.Failed++
			s.log.WarnContext(ctx, "stripe meter event failed", "identifier", ev.Identifier, "err", err)
			if _, err := s.db.Exec(ctx, `UPDATE stripe_meter_reports SET status = 'failed', attempts = attempts + 1, last_error = $2 WHERE identifier = $1`,
				ev.Identifier, truncate(err.Error(), 1000)); err != nil {
				return st, fmt.Errorf("metering: stripe report: %w", err)
			}
			continue
		}
		st.Sent++
		if _, err := s.db.Exec(ctx, `UPDATE stripe_meter_reports SET status = 'sent', attempts = attempts + 1, last_error = NULL, sent_at = $2 WHERE identifier = $1`,
			ev.Identifier, s.opts.Now()); err != nil {
			return st, fmt.Errorf("metering: stripe report: %w", err)
		}
	}
	// 3. Reports of unknown outcome past the window: never resent.
	if _, err := s.db.Exec(ctx, `
UPDATE stripe_meter_reports SET status = 'failed',
       last_error = coalesce(last_error || '; ', '') || 'not resent: older than Stripe''s 24h identifier window, check Stripe'
 WHERE status = 'pending' AND created_at <= $1`, now.Add(-resendWindow)); err != nil {
		return st, fmt.Errorf("metering: stripe report: %w", err)
	}
	return st, nil
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
