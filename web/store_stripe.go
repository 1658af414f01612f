package web

// The console's read model of Stripe: stored events and the resync's
// repairs.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventRow is a stored Stripe event.
type EventRow struct {
	ID            string
	Type          string
	CustomerID    string
	TenantID      string
	Created       time.Time
	ReceivedAt    time.Time
	Status        string
	IgnoredReason string
	APIVersion    string // the Stripe API version the event was sent in ("" for thin events)
	Attempts      int
	LastError     string
	ProcessedAt   *time.Time
	Payload       string // pretty JSON; only filled by event()
}

const eventCols = `id, type, COALESCE(stripe_customer_id, ''), COALESCE(tenant_id::text, ''), event_created, received_at,
	status, COALESCE(ignored_reason, ''), attempts, COALESCE(last_error, ''), processed_at, api_version`

func scanEvents(rows pgx.Rows) ([]EventRow, error) {
	var out []EventRow
	var e EventRow
	_, err := pgx.ForEachRow(rows, []any{&e.ID, &e.Type, &e.CustomerID, &e.TenantID, &e.Created, &e.ReceivedAt,
		&e.Status, &e.IgnoredReason, &e.Attempts, &e.LastError, &e.ProcessedAt, &e.APIVersion}, func() error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// events lists events, newest first, optionally of one status and one tenant.
func (s *store) events(ctx context.Context, status, tenantID string, limit int) ([]EventRow, error) {
	var tid *string
	if tenantID != "" {
		tid = &tenantID
	}
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+` FROM stripe_events
		WHERE ($1 = '' OR status = $1) AND ($2::uuid IS NULL OR tenant_id = $2::uuid)
		ORDER BY received_at DESC LIMIT $3`, status, tid, limit)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	return out, nil
}

func (s *store) event(ctx context.Context, id string) (EventRow, error) {
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+`, jsonb_pretty(payload) FROM stripe_events WHERE id = $1`, id)
	if err != nil {
		return EventRow{}, fmt.Errorf("web: event: %w", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (EventRow, error) {
		var e EventRow
		err := r.Scan(&e.ID, &e.Type, &e.CustomerID, &e.TenantID, &e.Created, &e.ReceivedAt,
			&e.Status, &e.IgnoredReason, &e.Attempts, &e.LastError, &e.ProcessedAt, &e.APIVersion, &e.Payload)
		return e, err
	})
	if err != nil {
		return EventRow{}, fmt.Errorf("web: event: %w", notFound(err, "Stripe event"))
	}
	return e, nil
}

// DriftRow is one repair made by the Stripe resync.
type DriftRow struct {
	ID             int64
	TenantID       string
	TenantName     string
	SubscriptionID string
	Field          string
	Ours           string
	Stripe         string
	RepairedAt     time.Time
}

func (s *store) drift(ctx context.Context, tenantID string, limit int) ([]DriftRow, error) {
	var tid *string
	if tenantID != "" {
		tid = &tenantID
	}
	rows, err := s.db.Query(ctx, `
		SELECT d.id, COALESCE(d.tenant_id::text, ''), COALESCE(t.name, ''), COALESCE(d.subscription_id, ''), d.field,
		       COALESCE(d.ours, ''), COALESCE(d.stripe, ''), d.repaired_at
		FROM drift_repairs d LEFT JOIN tenants t ON t.id = d.tenant_id
		WHERE ($1::uuid IS NULL OR d.tenant_id = $1::uuid)
		ORDER BY d.repaired_at DESC, d.id DESC LIMIT $2`, tid, limit)
	if err != nil {
		return nil, fmt.Errorf("web: drift: %w", err)
	}
	var out []DriftRow
	var d DriftRow
	_, err = pgx.ForEachRow(rows, []any{&d.ID, &d.TenantID, &d.TenantName, &d.SubscriptionID, &d.Field, &d.Ours, &d.Stripe, &d.RepairedAt}, func() error {
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: drift: %w", err)
	}
	return out, nil
}
