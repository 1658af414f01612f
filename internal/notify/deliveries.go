package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// ErrDeliveryNotFound is a delivery (or event) that does not exist for the
// endpoint.
var ErrDeliveryNotFound = apperr.New(apperr.NotFound, "webhook delivery not found")

// Delivery is one event's delivery to an endpoint, as the console and
// GET …/{id}/deliveries show it.
type Delivery struct {
	ID            int64      `json:"id"`
	EventID       string     `json:"event_id"`
	EventType     string     `json:"event_type"`
	Status        string     `json:"status"` // pending, delivered, failed
	Attempts      int        `json:"attempts"`
	LastCode      *int       `json:"last_code"`
	LastBody      *string    `json:"last_body"` // the receiver's answer, first 512 bytes
	LastError     *string    `json:"last_error"`
	LastAttemptAt *time.Time `json:"last_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at"`
	CreatedAt     time.Time  `json:"created_at"`
}

const deliveryCols = `d.id, d.event_id, ev.type, d.status, d.attempts, d.last_code, d.last_body, d.last_error, d.last_attempt_at, d.delivered_at, d.created_at`

// MaxDeliveriesPage is the most deliveries one page lists.
const MaxDeliveriesPage = 200

// Deliveries lists the endpoint's deliveries, newest first: limit of them
// (default 50, at most MaxDeliveriesPage) with ids below before (0: from
// the newest).
func (s *Service) Deliveries(ctx context.Context, endpointID string, limit int, before int64) ([]Delivery, error) {
	var v apperr.Validation
	if limit < 0 || limit > MaxDeliveriesPage {
		v.Add("limit", "must be 1-%d", MaxDeliveriesPage)
	}
	if before < 0 {
		v.Add("before", "must be a delivery id")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = 50
	}
	if _, err := s.Get(ctx, endpointID); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+deliveryCols+`
FROM webhook_deliveries d JOIN webhook_events ev ON ev.id = d.event_id
WHERE d.endpoint_id = $1 AND ($2 = 0 OR d.id < $2) ORDER BY d.id DESC LIMIT $3`, endpointID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("notify: deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Delivery])
	if err != nil {
		return nil, fmt.Errorf("notify: deliveries: %w", err)
	}
	if out == nil {
		out = []Delivery{}
	}
	return out, nil
}

// ErrAlreadyDelivered is a retry of a delivered delivery: replay sends it
// again.
var ErrAlreadyDelivered = apperr.New(apperr.Conflict, "the delivery was delivered; replay the event to send it again")

// RetryNow sends a pending or failed delivery now, whatever its backoff
// says: a new job of a new generation (the waiting one then sends
// nothing), with a fresh set of retries.
func (s *Service) RetryNow(ctx context.Context, endpointID string, deliveryID int64) (Delivery, error) {
	if !ids.IsUUID(endpointID) {
		return Delivery{}, ErrDeliveryNotFound
	}
	var d Delivery
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var status string
		var gen int
		err := tx.QueryRow(ctx, `SELECT status, gen FROM webhook_deliveries WHERE id = $1 AND endpoint_id = $2 FOR UPDATE`, deliveryID, endpointID).Scan(&status, &gen)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDeliveryNotFound
		}
		if err != nil {
			return fmt.Errorf("notify: retry: %w", err)
		}
		if status == "delivered" {
			return ErrAlreadyDelivered
		}
		d, err = s.requeue(ctx, tx, deliveryID)
		return err
	})
	return d, err
}

// Replay sends event eventID to the endpoint again, with the same
// webhook-id: its delivery (made if the endpoint had none, e.g. created
// after the event) goes back to pending with a new job.
func (s *Service) Replay(ctx context.Context, endpointID, eventID string) (Delivery, error) {
	if !ids.IsUUID(endpointID) {
		return Delivery{}, ErrDeliveryNotFound
	}
	var d Delivery
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id)
SELECT ev.id, e.id FROM webhook_events ev, webhook_endpoints e WHERE ev.id = $1 AND e.id = $2
ON CONFLICT (event_id, endpoint_id) DO UPDATE SET status = webhook_deliveries.status
RETURNING id`, eventID, endpointID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrDeliveryNotFound
		}
		if err != nil {
			return fmt.Errorf("notify: replay: %w", err)
		}
		d, err = s.requeue(ctx, tx, id)
		return err
	})
	return d, err
}

// requeue makes the delivery pending in a new generation and enqueues its
// job in tx.
func (s *Service) requeue(ctx context.Context, tx pgx.Tx, id int64) (Delivery, error) {
	var gen int
	if err := tx.QueryRow(ctx, `UPDATE webhook_deliveries SET status = 'pending', gen = gen + 1, delivered_at = NULL
WHERE id = $1 RETURNING gen`, id).Scan(&gen); err != nil {
		return Delivery{}, fmt.Errorf("notify: requeue: %w", err)
	}
	if _, err := s.insert.InsertTx(ctx, tx, DeliverArgs{DeliveryID: id, Gen: gen},
		&river.InsertOpts{MaxAttempts: len(s.opts.Backoff) + 1}); err != nil {
		return Delivery{}, fmt.Errorf("notify: requeue: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries d JOIN webhook_events ev ON ev.id = d.event_id WHERE d.id = $1`, id)
	if err != nil {
		return Delivery{}, fmt.Errorf("notify: requeue: %w", err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Delivery])
	if err != nil {
		return Delivery{}, fmt.Errorf("notify: requeue: %w", err)
	}
	return d, nil
}
