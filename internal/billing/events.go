package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/cursor"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// Event is a stored Stripe event as admins see it.
type Event struct {
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	APIVersion    string          `json:"api_version"`
	Livemode      bool            `json:"livemode"`
	CustomerID    *string         `json:"stripe_customer_id"`
	TenantID      *string         `json:"tenant_id"`
	Created       time.Time       `json:"created"`
	ReceivedAt    time.Time       `json:"received_at"`
	Status        string          `json:"status"`
	IgnoredReason *string         `json:"ignored_reason"`
	Attempts      int             `json:"attempts"`
	LastError     *string         `json:"last_error"`
	ProcessedAt   *time.Time      `json:"processed_at"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

// EventQuery selects a page of events, newest received first.
type EventQuery struct {
	Status string // "" = all; else pending, processed, ignored or failed
	Limit  int    // 1-200; 0 = 50
	Cursor string // NextCursor of the previous page
	// Filters the console's search uses; "" matches all.
	ID       string // an event id (evt_…), exactly
	Customer string // a Stripe customer id (cus_…), exactly
	TenantID string // the tenant the event was applied to
}

// where is the query's filter as SQL on stripe_events, with its arguments
// as $1…; only the conditions that apply are written, so that each form
// of the query is planned on its index (stripe_events_pkey,
// stripe_events_customer_idx, stripe_events_status_received_idx,
// stripe_events_received_idx) rather than a generic plan of ORs.
func (q EventQuery) where() (string, []any) {
	conds, args := []string{"true"}, []any{}
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if q.Status != "" {
		add("status = $%d", q.Status)
	}
	if q.ID != "" {
		add("id = $%d", q.ID)
	}
	if q.Customer != "" {
		add("stripe_customer_id = $%d", q.Customer)
	}
	if q.TenantID != "" {
		add("tenant_id = $%d::uuid", q.TenantID)
	}
	return strings.Join(conds, " AND "), args
}

// EventPage is one page of events.
type EventPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

const eventCols = `id, type, api_version, livemode, stripe_customer_id, tenant_id::text, event_created, received_at,
	status, ignored_reason, attempts, last_error, processed_at`

func scanEvent(r pgx.Row, withPayload bool) (Event, error) {
	var e Event
	dest := []any{&e.ID, &e.Type, &e.APIVersion, &e.Livemode, &e.CustomerID, &e.TenantID, &e.Created, &e.ReceivedAt,
		&e.Status, &e.IgnoredReason, &e.Attempts, &e.LastError, &e.ProcessedAt}
	if withPayload {
		dest = append(dest, &e.Payload)
	}
	err := r.Scan(dest...)
	return e, err
}

// ListEvents lists stored events for admins.
func (s *Service) ListEvents(ctx context.Context, q EventQuery) (EventPage, error) {
	var v apperr.Validation
	switch q.Status {
	case "", StatusPending, StatusProcessed, StatusIgnored, StatusFailed:
	default:
		v.Add("status", "must be pending, processed, ignored or failed")
	}
	if q.Limit == 0 {
		q.Limit = 50
	}
	if q.Limit < 1 || q.Limit > 200 {
		v.Add("limit", "must be 1-200")
	}
	var afterAt *time.Time
	var afterID *string
	if q.Cursor != "" {
		at, id, ok := cursor.Decode(q.Cursor)
		if !ok {
			v.Add("cursor", "is not a cursor this API returned")
		}
		afterAt, afterID = &at, &id
	}
	if err := v.Err(); err != nil {
		return EventPage{}, err
	}
	if q.TenantID != "" && !ids.IsUUID(q.TenantID) {
		return EventPage{Events: []Event{}}, nil
	}
	where, args := q.where()
	if afterAt != nil {
		args = append(args, *afterAt, *afterID)
		where += fmt.Sprintf(" AND (received_at, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	args = append(args, q.Limit+1)
	rows, err := s.db.Query(ctx, `SELECT `+eventCols+` FROM stripe_events WHERE `+where+`
		ORDER BY received_at DESC, id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return EventPage{}, fmt.Errorf("billing: list events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r, false) })
	if err != nil {
		return EventPage{}, fmt.Errorf("billing: list events: %w", err)
	}
	page := EventPage{Events: events}
	if len(events) > q.Limit {
		page.Events = events[:q.Limit]
		last := page.Events[q.Limit-1]
		page.NextCursor = cursor.Encode(last.ReceivedAt, last.ID)
	}
	if page.Events == nil {
		page.Events = []Event{}
	}
	return page, nil
}

// GetEvent returns one stored event with its payload.
func (s *Service) GetEvent(ctx context.Context, id string) (Event, error) {
	e, err := scanEvent(s.db.QueryRow(ctx, `SELECT `+eventCols+`, payload FROM stripe_events WHERE id = $1`, id), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, apperr.New(apperr.NotFound, "no Stripe event %q", id)
	}
	if err != nil {
		return Event{}, fmt.Errorf("billing: get event: %w", err)
	}
	return e, nil
}

// Replay runs a stored event again, whatever its status: it is set pending
// and its job enqueued in one transaction. Applying is idempotent, so a
// replay of an applied event changes nothing.
func (s *Service) Replay(ctx context.Context, id string) (Event, error) {
	var e Event
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		e, err = scanEvent(tx.QueryRow(ctx, `UPDATE stripe_events SET status = 'pending', ignored_reason = NULL, last_error = NULL
			WHERE id = $1 RETURNING `+eventCols, id), false)
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "no Stripe event %q", id)
		}
		if err != nil {
			return fmt.Errorf("billing: replay event: %w", err)
		}
		customer := ""
		if e.CustomerID != nil {
			customer = *e.CustomerID
		}
		if _, err := s.jobs.InsertTx(ctx, tx, EventArgs{EventID: id, CustomerID: customer, Replay: true}, nil); err != nil {
			return fmt.Errorf("billing: enqueue replay: %w", err)
		}
		return nil
	})
	if err != nil {
		return Event{}, err
	}
	s.log.InfoContext(ctx, "stripe event replay enqueued", "event_id", id)
	return e, nil
}
