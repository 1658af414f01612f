package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// EventWorker works EventArgs: it applies one stored event.
type EventWorker struct {
	river.WorkerDefaults[EventArgs]
	S *Service
}

// Work applies the event. An error makes River retry with backoff; the
// event's attempts and last error are recorded, and after the last attempt
// the event is failed.
func (w *EventWorker) Work(ctx context.Context, job *river.Job[EventArgs]) error {
	err := w.S.ProcessEvent(ctx, job.Args.EventID, job.Args.Replay)
	if err != nil {
		final := job.Attempt >= job.MaxAttempts
		// The job's context may be canceled (a stopping worker): the
		// bookkeeping still has to land.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		w.S.recordFailure(bctx, job.Args.EventID, err, final)
	}
	return err
}

// storedEvent is a row of stripe_events as the worker needs it.
type storedEvent struct {
	ID         string
	Type       string
	APIVersion string
	Customer   string
	Status     string
	ReceivedAt time.Time
	Created    time.Time
	// Object is data.object (snapshot events); empty for thin events.
	Object json.RawMessage
	// Thin: a v2 thin event notification (object v2.core.event).
	Thin bool
}

// outcome of applying one event.
type outcome struct {
	status   string // processed, ignored or failed
	reason   string // why ignored or failed
	tenantID string // the tenant the event concerned, when known
	// publishGrants: the tenant's grants changed (a Stripe credit grant
	// mirrored or voided); they are written to Redis after the commit.
	publishGrants bool
	// creditSkip: a Stripe credit grant not mirrored, and why (the label
	// of tollgate_stripe_credit_grants_skipped_total).
	creditSkip string
}

func ignored(tenantID, format string, args ...any) outcome {
	return outcome{status: StatusIgnored, tenantID: tenantID, reason: fmt.Sprintf(format, args...)}
}

// failed is an event that no retry can apply (its data contradicts our
// rules); it is recorded failed at once with the reason as its last error,
// for an admin to see and fix (then replay).
func failed(tenantID, format string, args ...any) outcome {
	return outcome{status: StatusFailed, tenantID: tenantID, reason: fmt.Sprintf(format, args...)}
}

// ProcessEvent applies a stored event once. An event already processed or
// ignored is left alone unless replay is set.
func (s *Service) ProcessEvent(ctx context.Context, eventID string, replay bool) error {
	ev, err := s.loadEvent(ctx, s.db, eventID, false)
	if errors.Is(err, pgx.ErrNoRows) {
		// Nothing to do: the row is gone (never stored, or deleted by hand).
		s.log.WarnContext(ctx, "stripe event job without event", "event_id", eventID)
		return nil
	}
	if err != nil {
		return err
	}
	if !replay && (ev.Status == StatusProcessed || ev.Status == StatusIgnored) {
		return nil
	}
	// Calls to Stripe happen here, before the transaction.
	pre, err := s.prefetch(ctx, ev)
	if err != nil {
		return err
	}
	var res outcome
	_, err = s.ents.WriteAndPublish(ctx, func(ctx context.Context, w *entitlements.Writes) error {
		tx := w.Tx()
		res = outcome{}
		if ev.Customer != "" {
			// One customer's events apply one at a time, across workers.
			if err := lockCustomer(ctx, tx, ev.Customer); err != nil {
				return err
			}
		}
		cur, err := s.loadEvent(ctx, tx, eventID, true)
		if err != nil {
			return err
		}
		if !replay && (cur.Status == StatusProcessed || cur.Status == StatusIgnored) {
			return nil // someone else applied it while we waited
		}
		if s.opts.BeforeApply != nil {
			if err := s.opts.BeforeApply(ctx, eventID); err != nil {
				return err
			}
		}
		w.Reason("stripe: " + cur.Type + " " + cur.ID)
		res, err = s.apply(ctx, w, cur, pre)
		if err != nil {
			return err
		}
		var ignoredReason, lastError *string
		if res.status == StatusFailed {
			lastError = nullable(res.reason)
		} else {
			ignoredReason = nullable(res.reason)
		}
		_, err = tx.Exec(ctx, `
			UPDATE stripe_events SET status = $2, ignored_reason = $3, attempts = attempts + 1,
				last_error = $6, processed_at = $4, tenant_id = COALESCE($5::uuid, tenant_id)
			WHERE id = $1`,
			eventID, res.status, ignoredReason, s.opts.Now(), nullable(res.tenantID), lastError)
		if err != nil {
			return fmt.Errorf("billing: mark event: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if res.status == "" {
		return nil
	}
	if res.creditSkip != "" {
		s.m.creditSkipped.WithLabelValues(res.creditSkip).Inc()
	}
	if res.publishGrants && s.opts.Credits != nil {
		// Committed: the limiter draws (or stops drawing) them from its
		// next read of the list. A failed write is logged by credits and
		// repaired by its sweep.
		_ = s.opts.Credits.Publish(ctx, res.tenantID)
	}
	s.m.processed.WithLabelValues(typeLabel(ev.Type), res.status).Inc()
	s.m.lag.Observe(s.opts.Now().Sub(ev.ReceivedAt).Seconds())
	// On the job's span (a no-op while tracing is off).
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("stripe.event_id", eventID), attribute.String("stripe.event_type", ev.Type),
		attribute.String("tollgate.stripe.outcome", res.status), attribute.String("tollgate.tenant_id", res.tenantID))
	switch res.status {
	case StatusIgnored:
		s.log.InfoContext(ctx, "stripe event ignored", "event_id", eventID, "type", ev.Type, "reason", res.reason)
	case StatusFailed:
		s.log.ErrorContext(ctx, "stripe event cannot be applied", "event_id", eventID, "type", ev.Type, "reason", res.reason)
	}
	return nil
}

// lockCustomer serialises, until tx ends, everything that changes one Stripe
// customer's subscriptions: event processing, outbound plan changes and
// resync repairs take the same lock, so one customer's changes apply one at
// a time across workers.
func lockCustomer(ctx context.Context, tx pgx.Tx, customer string) error {
	if err := postgres.XactLock(ctx, tx, "tollgate.stripe_customer:"+customer); err != nil {
		return fmt.Errorf("billing: lock customer: %w", err)
	}
	return nil
}

func (s *Service) loadEvent(ctx context.Context, q postgres.Querier, id string, lock bool) (storedEvent, error) {
	sql := `SELECT id, type, api_version, COALESCE(stripe_customer_id, ''), status, received_at, event_created, payload FROM stripe_events WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var ev storedEvent
	var payload []byte
	err := q.QueryRow(ctx, sql, id).Scan(&ev.ID, &ev.Type, &ev.APIVersion, &ev.Customer, &ev.Status, &ev.ReceivedAt, &ev.Created, &payload)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return ev, err
		}
		return ev, fmt.Errorf("billing: load event: %w", err)
	}
	var p struct {
		Object string `json:"object"`
		Data   *struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return ev, fmt.Errorf("billing: decode stored event: %w", err)
	}
	ev.Thin = p.Object == thinObject
	if p.Data != nil {
		ev.Object = p.Data.Object
	}
	return ev, nil
}

// recordFailure notes a failed attempt; final marks the event failed.
func (s *Service) recordFailure(ctx context.Context, eventID string, cause error, final bool) {
	status := StatusPending
	if final {
		status = StatusFailed
	}
	msg := cause.Error()
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	var typ string
	err := s.db.QueryRow(ctx, `
		UPDATE stripe_events SET attempts = attempts + 1, last_error = $2, status = $3
		WHERE id = $1 AND status IN ('pending', 'failed')
		RETURNING type`, eventID, msg, status).Scan(&typ)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.log.ErrorContext(ctx, "stripe event failure not recorded", "event_id", eventID, "err", err)
	}
	s.m.failures.WithLabelValues(typeLabel(typ)).Inc()
	if final {
		s.m.processed.WithLabelValues(typeLabel(typ), StatusFailed).Inc()
		s.log.ErrorContext(ctx, "stripe event failed for good", "event_id", eventID, "err", cause)
	} else {
		s.log.WarnContext(ctx, "stripe event attempt failed", "event_id", eventID, "err", cause)
	}
}
