package metering

// Reads for the dashboard, the console and the worker's gauges (issue 24):
// usage_hourly, refusals_daily, usage_periods and stripe_meter_reports are
// metering's, so other packages ask here instead of querying them.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/ids"
)

// DayUsage is the usage of one meter on one UTC day.
type DayUsage struct {
	Day   time.Time
	Meter string
	Used  int64
}

// DailyUsage sums the tenant's hourly history of the period starting at
// periodStart per UTC day, oldest first. Rows are kept per period (the hour
// a period starts in is one row per period), so selecting by period keeps
// the new period's first minutes and none of the previous period's end in
// the same clock hour.
func (s *Service) DailyUsage(ctx context.Context, tenantID string, periodStart time.Time) ([]DayUsage, error) {
	if !ids.IsUUID(tenantID) {
		return []DayUsage{}, nil
	}
	rows, err := s.db.Query(ctx, `
SELECT date_trunc('day', hour AT TIME ZONE 'UTC') AS day, meter, sum(used)::bigint
  FROM usage_hourly WHERE tenant_id = $1 AND period_start = $2
 GROUP BY 1, 2 ORDER BY 1, 2`, tenantID, periodStart)
	if err != nil {
		return nil, fmt.Errorf("metering: daily usage: %w", err)
	}
	out := []DayUsage{}
	var d DayUsage
	if _, err := pgx.ForEachRow(rows, []any{&d.Day, &d.Meter, &d.Used}, func() error {
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		out = append(out, d)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("metering: daily usage: %w", err)
	}
	return out, nil
}

// DayRefusals is the refused requests of one policy on one UTC day.
type DayRefusals struct {
	Day     time.Time
	Policy  string
	Refused int64
}

// DailyRefusals lists the tenant's flushed refusals per day and policy on
// the UTC days from..to (both included), oldest first.
func (s *Service) DailyRefusals(ctx context.Context, tenantID string, from, to time.Time) ([]DayRefusals, error) {
	if !ids.IsUUID(tenantID) {
		return []DayRefusals{}, nil
	}
	rows, err := s.db.Query(ctx, `
SELECT day, policy, refused FROM refusals_daily
 WHERE tenant_id = $1 AND day >= $2::date AND day <= $3::date ORDER BY day, policy`,
		tenantID, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("metering: daily refusals: %w", err)
	}
	out := []DayRefusals{}
	var d DayRefusals
	if _, err := pgx.ForEachRow(rows, []any{&d.Day, &d.Policy, &d.Refused}, func() error {
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		out = append(out, d)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("metering: daily refusals: %w", err)
	}
	return out, nil
}

// ReportToCheck is a usage report to Stripe that needs a look: failed, or
// billed late (after its period's invoice was final).
type ReportToCheck struct {
	Identifier string
	TenantID   string
	Meter      string
	Quantity   int64
	Status     string
	Late       bool
	Attempts   int
	LastError  string
	EventTime  *time.Time
	CreatedAt  time.Time
}

// ReportsToCheck lists the failed or late usage reports, newest first, at
// most limit.
func (s *Service) ReportsToCheck(ctx context.Context, limit int) ([]ReportToCheck, error) {
	rows, err := s.db.Query(ctx, `
SELECT identifier, tenant_id::text, meter, quantity, status, late, attempts,
       coalesce(last_error, ''), event_time, created_at
  FROM stripe_meter_reports
 WHERE status = 'failed' OR late
 ORDER BY created_at DESC, identifier LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("metering: reports to check: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ReportToCheck])
	if err != nil {
		return nil, fmt.Errorf("metering: reports to check: %w", err)
	}
	return out, nil
}

// Backlog is what the worker's gauges show of metering's state.
type Backlog struct {
	// OverduePeriods are periods that ended more than ten minutes ago and
	// are still open (their close job is behind).
	OverduePeriods int64
	// Reports counts usage reports to Stripe by status (pending, sent,
	// failed; every one present, 0 when none).
	Reports map[string]int64
}

// ReadBacklog reads the Backlog.
func (s *Service) ReadBacklog(ctx context.Context) (Backlog, error) {
	b := Backlog{Reports: map[string]int64{"pending": 0, "sent": 0, "failed": 0}}
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM usage_periods WHERE closed_at IS NULL AND period_end < now() - interval '10 minutes'`).Scan(&b.OverduePeriods); err != nil {
		return Backlog{}, fmt.Errorf("metering: backlog: open periods: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT status, count(*) FROM stripe_meter_reports GROUP BY status`)
	if err != nil {
		return Backlog{}, fmt.Errorf("metering: backlog: meter reports: %w", err)
	}
	var status string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { b.Reports[status] = n; return nil }); err != nil {
		return Backlog{}, fmt.Errorf("metering: backlog: meter reports: %w", err)
	}
	return b, nil
}
