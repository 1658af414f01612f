package metering

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// ClosePeriodsArgs closes finished periods: a final flush, then closed_at
// on every open period that ended more than CloseGrace ago. Its figures
// stay as they are (usage events up to MaxEventAge late still add to
// them, as Stripe meters accept them).
type ClosePeriodsArgs struct{}

// Kind names the job in River's table.
func (ClosePeriodsArgs) Kind() string { return "metering_close_periods" }

// ClosePeriodsWorker runs ClosePeriodsArgs.
type ClosePeriodsWorker struct {
	river.WorkerDefaults[ClosePeriodsArgs]
	Service *Service
}

// Work flushes and closes.
func (w *ClosePeriodsWorker) Work(ctx context.Context, _ *river.Job[ClosePeriodsArgs]) error {
	_, err := w.Service.ClosePeriods(ctx)
	return err
}

// ClosePeriods flushes the limiter's counters first (so that a closing
// figure includes every decision of the period's last second), then marks
// ended periods closed, and prunes flush records older than any claim can
// live in Redis. It returns how many periods it closed.
func (s *Service) ClosePeriods(ctx context.Context) (int64, error) {
	if _, err := s.FlushOnce(ctx); err != nil {
		return 0, err
	}
	now := s.opts.Now()
	var closed []closedRow
	var cutShort int64
	// Both updates and the period.closed events share one transaction, so
	// a window's event exists exactly when it was closed (once: a closed
	// row is never closed again).
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		closed, cutShort = nil, 0
		rows, err := tx.Query(ctx, `
UPDATE usage_periods SET closed_at = $1, updated_at = $1
 WHERE closed_at IS NULL AND period_end <= $2
RETURNING tenant_id::text, meter, period_start, period_end, used`, now, now.Add(-s.opts.CloseGrace))
		if err != nil {
			return fmt.Errorf("metering: close periods: %w", err)
		}
		closed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[closedRow])
		if err != nil {
			return fmt.Errorf("metering: close periods: %w", err)
		}
		// A window that a new billing cycle anchor cut short (since
		// 2025-12-15.clover the customer portal may move it): the tenant's
		// current subscription period now starts inside an open window, which
		// ended there. It is closed with its figure and the end it really had,
		// once the grace has passed as for any other window (issue 25).
		rows, err = tx.Query(ctx, `
UPDATE usage_periods u SET closed_at = $1, updated_at = $1, period_end = s.current_period_start
  FROM tenant_accounts s
 WHERE u.tenant_id = s.tenant_id AND u.closed_at IS NULL AND s.current_period_start IS NOT NULL
   AND u.period_start < s.current_period_start AND u.period_end > s.current_period_start
   AND s.current_period_start <= $2
RETURNING u.tenant_id::text, u.meter, u.period_start, u.period_end, u.used`, now, now.Add(-s.opts.CloseGrace))
		if err != nil {
			return fmt.Errorf("metering: close moved periods: %w", err)
		}
		moved, err := pgx.CollectRows(rows, pgx.RowToStructByPos[closedRow])
		if err != nil {
			return fmt.Errorf("metering: close moved periods: %w", err)
		}
		cutShort = int64(len(moved))
		closed = append(closed, moved...)
		if s.opts.PeriodsClosed == nil || len(closed) == 0 {
			return nil
		}
		if err := s.opts.PeriodsClosed(ctx, tx, closedWindows(closed)); err != nil {
			return fmt.Errorf("metering: period closed: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := int64(len(closed))
	if n > 0 {
		s.log.InfoContext(ctx, "periods closed", "count", n, "cut_short", cutShort)
	}
	// A flushing record lives 40 days in Redis (limiter's claim TTL); a
	// batch id older than that can never be replayed.
	if _, err := s.db.Exec(ctx, `DELETE FROM usage_flushes WHERE flushed_at < $1`, now.Add(-41*24*time.Hour)); err != nil {
		return n, fmt.Errorf("metering: prune flushes: %w", err)
	}
	return n, nil
}

// ClosePeriodsPeriodic schedules ClosePeriodsArgs every minute.
func ClosePeriodsPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Minute),
		func() (river.JobArgs, *river.InsertOpts) { return ClosePeriodsArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "metering_close_periods"})
}

// ExpireOverridesArgs refreshes tenants whose quota override has just
// expired, so that the expiry takes effect through a new entitlement
// version.
type ExpireOverridesArgs struct{}

// Kind names the job in River's table.
func (ExpireOverridesArgs) Kind() string { return "metering_expire_overrides" }

// ExpireOverridesWorker runs ExpireOverridesArgs with Refresh (cmd wires
// the entitlements service's RefreshExpiredOverrides).
type ExpireOverridesWorker struct {
	river.WorkerDefaults[ExpireOverridesArgs]
	Refresh func(ctx context.Context) (int, error)
}

// Work refreshes.
func (w *ExpireOverridesWorker) Work(ctx context.Context, _ *river.Job[ExpireOverridesArgs]) error {
	_, err := w.Refresh(ctx)
	return err
}

// ExpireOverridesPeriodic schedules ExpireOverridesArgs every 10 seconds:
// an expired override applies at most that much longer.
func ExpireOverridesPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(10*time.Second),
		func() (river.JobArgs, *river.InsertOpts) { return ExpireOverridesArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "metering_expire_overrides"})
}
