package billing

// Reads of stored events for the console (issue 24): stripe_events is
// billing's, so the console's lists, its bulk replay and its metered-billing
// page ask here.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailedEvents are the ids of the failed events that match q (its Status,
// Limit and Cursor are ignored), newest first, at most limit (0 = none,
// only the count), and how many match in all.
func (s *Service) FailedEvents(ctx context.Context, q EventQuery, limit int) ([]string, int64, error) {
	q.Status = StatusFailed
	where, args := q.where()
	var total int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM stripe_events WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("billing: failed events: %w", err)
	}
	if limit <= 0 || total == 0 {
		return []string{}, total, nil
	}
	args = append(args, limit)
	rows, err := s.db.Query(ctx, `SELECT id FROM stripe_events WHERE `+where+`
		ORDER BY received_at DESC, id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("billing: failed events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, 0, fmt.Errorf("billing: failed events: %w", err)
	}
	return out, total, nil
}

// FailedAmong keeps the ids of events that are failed, newest first: a
// bulk replay confirmed on a page replays only what is still failed.
func (s *Service) FailedAmong(ctx context.Context, ids []string) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id FROM stripe_events WHERE id = ANY($1) AND status = 'failed'
		ORDER BY received_at DESC, id DESC`, ids)
	if err != nil {
		return nil, fmt.Errorf("billing: failed events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("billing: failed events: %w", err)
	}
	return out, nil
}

// MeterError is one Stripe meter error notification (a thin event such as
// v1.billing.meter.error_report_triggered, stored by the webhook): Stripe
// could not bill meter events it had accepted (unknown customer, bad value).
type MeterError struct {
	EventID    string
	Type       string
	Meter      string // related_object.id, mtr_…
	Summary    string // data.developer_message_summary when the stored event has it
	ReceivedAt time.Time
}

// MeterErrors lists the stored meter error notifications, newest first, at
// most limit.
func (s *Service) MeterErrors(ctx context.Context, limit int) ([]MeterError, error) {
	rows, err := s.db.Query(ctx, `
		SELECT id, type, COALESCE(payload->'related_object'->>'id', ''),
		       COALESCE(payload->'data'->>'developer_message_summary', ''), received_at
		FROM stripe_events WHERE type LIKE 'v1.billing.meter.%'
		ORDER BY received_at DESC, id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("billing: meter errors: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[MeterError])
	if err != nil {
		return nil, fmt.Errorf("billing: meter errors: %w", err)
	}
	return out, nil
}
