package web

// The console's read model of Stripe: stored events and the resync's
// repairs.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// EventRow is a stored Stripe event.
type EventRow struct {
	ID            string
	Type          string
	CustomerID    string
	TenantID      string
	TenantName    string // "" when the event names no tenant (or it is gone)
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

// eventCols are read from stripe_events e LEFT JOIN tenants t.
const eventCols = `e.id, e.type, COALESCE(e.stripe_customer_id, ''), COALESCE(e.tenant_id::text, ''), COALESCE(t.name, ''),
	e.event_created, e.received_at, e.status, COALESCE(e.ignored_reason, ''), e.attempts, COALESCE(e.last_error, ''),
	e.processed_at, e.api_version`

const eventFrom = ` FROM stripe_events e LEFT JOIN tenants t ON t.id = e.tenant_id `

func eventDest(e *EventRow) []any {
	return []any{&e.ID, &e.Type, &e.CustomerID, &e.TenantID, &e.TenantName, &e.Created, &e.ReceivedAt,
		&e.Status, &e.IgnoredReason, &e.Attempts, &e.LastError, &e.ProcessedAt, &e.APIVersion}
}

func scanEvents(rows pgx.Rows) ([]EventRow, error) {
	var out []EventRow
	var e EventRow
	_, err := pgx.ForEachRow(rows, eventDest(&e), func() error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// events lists a tenant's last events, newest first.
func (s *store) events(ctx context.Context, tenantID string, limit int) ([]EventRow, error) {
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+eventFrom+`
		WHERE e.tenant_id = $1 ORDER BY e.received_at DESC, e.id DESC LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	return out, nil
}

// eventFilter selects the console's events list; empty fields match all.
type eventFilter struct {
	Status   string // pending, processed, ignored or failed
	ID       string // an event id (evt_…), exactly
	Customer string // a Stripe customer id (cus_…), exactly
}

// where is the filter as SQL on stripe_events e, with its arguments as $1…;
// only the conditions that apply are written, so that each form of the
// query is planned on its index (stripe_events_pkey,
// stripe_events_customer_idx, stripe_events_status_received_idx,
// stripe_events_received_idx) rather than a generic plan of ORs.
func (f eventFilter) where() (string, []any) {
	conds, args := []string{"true"}, []any{}
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if f.Status != "" {
		add("e.status = $%d", f.Status)
	}
	if f.ID != "" {
		add("e.id = $%d", f.ID)
	}
	if f.Customer != "" {
		add("e.stripe_customer_id = $%d", f.Customer)
	}
	return strings.Join(conds, " AND "), args
}

// eventPage lists the events that match f, newest first, after the row
// (afterAt, afterID) when afterAt is set (keyset pagination).
func (s *store) eventPage(ctx context.Context, f eventFilter, afterAt *time.Time, afterID string, limit int) ([]EventRow, error) {
	where, args := f.where()
	if afterAt != nil {
		args = append(args, *afterAt, afterID)
		where += fmt.Sprintf(" AND (e.received_at, e.id) < ($%d, $%d)", len(args)-1, len(args))
	}
	args = append(args, limit)
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+eventFrom+` WHERE `+where+`
		ORDER BY e.received_at DESC, e.id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	out, err := scanEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("web: events: %w", err)
	}
	return out, nil
}

// failedIDs are the ids of failed events that match f, newest first, at
// most limit, and how many match in all.
func (s *store) failedIDs(ctx context.Context, f eventFilter, limit int) ([]string, int64, error) {
	f.Status = "failed"
	where, args := f.where()
	var total int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM stripe_events e WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("web: failed events: %w", err)
	}
	if limit == 0 || total == 0 {
		return nil, total, nil
	}
	args = append(args, limit)
	rows, err := s.db.Query(ctx, `SELECT e.id FROM stripe_events e WHERE `+where+`
		ORDER BY e.received_at DESC, e.id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("web: failed events: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, 0, fmt.Errorf("web: failed events: %w", err)
	}
	return ids, total, nil
}

// failedAmong keeps the ids of events that are failed, newest first.
func (s *store) failedAmong(ctx context.Context, ids []string) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id FROM stripe_events WHERE id = ANY($1) AND status = 'failed'
		ORDER BY received_at DESC, id DESC`, ids)
	if err != nil {
		return nil, fmt.Errorf("web: failed events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("web: failed events: %w", err)
	}
	return out, nil
}

func (s *store) event(ctx context.Context, id string) (EventRow, error) {
	var e EventRow
	err := s.db.QueryRow(ctx, `SELECT `+eventCols+`, jsonb_pretty(e.payload)`+eventFrom+`WHERE e.id = $1`, id).
		Scan(append(eventDest(&e), &e.Payload)...)
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

// OtherSubRow is a subscription of the tenant besides the current one: an
// overlapping plan subscription (a re-subscribe beside the old one, which
// grants its add-ons, never the plan) or one that bills add-ons on its own.
type OtherSubRow struct {
	ID                string
	Status            string
	PriceID           string
	CancelAtPeriodEnd bool
	PlanItem          bool
	Overlapping       bool // live with a plan item: not enforced, shown so that an admin can cancel it
}

// otherSubscriptions lists the tenant's subscriptions other than the
// current one (entitlements.CurrentSubscriptionOf), live ones first.
func (s *store) otherSubscriptions(ctx context.Context, tenantID string) ([]OtherSubRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT s.id, s.status, COALESCE(s.stripe_price_id, ''), s.cancel_at_period_end, s.has_plan_item,
		       s.id IN (`+entitlements.OverlappingSubscriptionsOf("$1")+`)
		FROM subscriptions s
		WHERE s.tenant_id = $1 AND s.id IS DISTINCT FROM (SELECT c.id FROM (`+entitlements.CurrentSubscriptionOf("$1")+`) c)
		ORDER BY s.status IN ('active', 'trialing', 'past_due') DESC, s.start_date DESC NULLS LAST, s.id LIMIT 20`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: other subscriptions: %w", err)
	}
	var out []OtherSubRow
	var r OtherSubRow
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Status, &r.PriceID, &r.CancelAtPeriodEnd, &r.PlanItem, &r.Overlapping}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: other subscriptions: %w", err)
	}
	return out, nil
}
