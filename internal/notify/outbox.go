package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Event is one webhook's body: {"id", "type", "timestamp", "data"}.
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
	// DedupeKey, when set, makes the event exactly-once: a second Emit
	// with the same key (another flusher, a replay) writes nothing.
	DedupeKey string `json:"-"`
}

// DeliverArgs is the River job of one delivery (an event to an endpoint).
type DeliverArgs struct {
	DeliveryID int64 `json:"delivery_id"`
	// Gen is the delivery's generation the job sends for; a retry-now or
	// replay makes a new one, and a job of an older one sends nothing.
	Gen int `json:"gen,omitempty"`
}

// Kind names the job in River's table.
func (DeliverArgs) Kind() string { return "webhook_deliver" }

// Emit writes events to the outbox inside tx, the transaction of the change
// that caused them, with one delivery (and its River job) per enabled
// endpoint that takes the type. It returns how many events were new.
func (s *Service) Emit(ctx context.Context, tx pgx.Tx, events ...Event) (int, error) {
	n := 0
	var jobs []river.InsertManyParams
	for _, ev := range events {
		if ev.ID == "" {
			ev.ID = newMsgID()
		}
		if ev.Timestamp.IsZero() {
			ev.Timestamp = s.opts.Now()
		}
		ev.Timestamp = ev.Timestamp.UTC()
		body, err := json.Marshal(ev)
		if err != nil {
			return 0, fmt.Errorf("notify: event %s: %w", ev.Type, err)
		}
		var dedupe *string
		if ev.DedupeKey != "" {
			dedupe = &ev.DedupeKey
		}
		tag, err := tx.Exec(ctx, `INSERT INTO webhook_events (id, type, payload, dedupe_key) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING`, ev.ID, ev.Type, body, dedupe)
		if err != nil {
			return 0, fmt.Errorf("notify: outbox: %w", err)
		}
		if tag.RowsAffected() == 0 {
			continue // emitted before
		}
		n++
		rows, err := tx.Query(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id)
SELECT $1, id FROM webhook_endpoints WHERE enabled AND (cardinality(events) = 0 OR $2 = ANY (events))
RETURNING id`, ev.ID, ev.Type)
		if err != nil {
			return 0, fmt.Errorf("notify: deliveries: %w", err)
		}
		dids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return 0, fmt.Errorf("notify: deliveries: %w", err)
		}
		for _, id := range dids {
			jobs = append(jobs, river.InsertManyParams{Args: DeliverArgs{DeliveryID: id},
				InsertOpts: &river.InsertOpts{MaxAttempts: len(s.opts.Backoff) + 1}})
		}
	}
	if len(jobs) > 0 {
		if _, err := s.insert.InsertManyTx(ctx, tx, jobs); err != nil {
			return 0, fmt.Errorf("notify: enqueue deliveries: %w", err)
		}
	}
	return n, nil
}

// newMsgID is a webhook-id: unique per event, the same on every retry.
func newMsgID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "msg_" + hex.EncodeToString(b)
}
