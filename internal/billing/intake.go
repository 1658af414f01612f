package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/jobs"
)

// Event statuses.
const (
	StatusPending   = "pending"
	StatusProcessed = "processed"
	StatusIgnored   = "ignored"
	StatusFailed    = "failed"
)

// intakeTimeout bounds storing one event.
const intakeTimeout = 5 * time.Second

// Receipt is what the webhook answers once an event is stored.
type Receipt struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Duplicate bool   `json:"duplicate"`
	Status    string `json:"status"`
}

// EventArgs is the River job of one stored event.
type EventArgs struct {
	EventID    string `json:"event_id"`
	CustomerID string `json:"customer_id,omitempty"`
	// Replay processes the event even when it was already processed or
	// ignored (an admin asked for it).
	Replay bool `json:"replay,omitempty"`
}

// Kind names the job in River's table.
func (EventArgs) Kind() string { return "stripe_event" }

// InsertOpts puts every event job on the Stripe queue with our attempt limit.
func (EventArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueStripe, MaxAttempts: MaxAttempts}
}

// Receive verifies a webhook delivery and stores it with its job in one
// transaction. Errors are apperr: Invalid (bad signature, timestamp or body),
// Unavailable (no secret configured, database down).
func (s *Service) Receive(ctx context.Context, body []byte, sigHeader string) (Receipt, error) {
	if s.opts.WebhookSecret == "" {
		s.m.webhook.WithLabelValues("unknown", "unavailable").Inc()
		return Receipt{}, apperr.New(apperr.Unavailable, "Stripe webhooks are not configured: STRIPE_WEBHOOK_SECRET is empty")
	}
	ev, err := s.verify(body, sigHeader)
	if err != nil {
		s.m.webhook.WithLabelValues("unknown", "rejected").Inc()
		return Receipt{}, err
	}
	rc := Receipt{ID: ev.ID, Type: string(ev.Type), Status: StatusPending}
	var reason *string
	if ev.APIVersion != stripe.APIVersion {
		// Fields move between API versions; guessing at them could apply
		// the wrong state, so the event is kept for an admin to see.
		r := fmt.Sprintf("api_version %q is not %q (the version stripe-go v79 decodes); stored, not processed", ev.APIVersion, stripe.APIVersion)
		reason, rc.Status = &r, StatusIgnored
	}
	customer := customerOf(ev)
	// A database that hangs rather than refuses must still get Stripe a 503
	// well before its own delivery timeout, so that it retries.
	ctx, cancel := context.WithTimeout(ctx, intakeTimeout)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO stripe_events (id, type, api_version, livemode, stripe_customer_id, event_created, payload, status, ignored_reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO NOTHING`,
			ev.ID, string(ev.Type), ev.APIVersion, ev.Livemode, nullable(customer), time.Unix(ev.Created, 0).UTC(),
			json.RawMessage(jsonbSafe(body)), rc.Status, reason)
		if err != nil {
			return fmt.Errorf("billing: store event: %w", err)
		}
		if tag.RowsAffected() == 0 {
			rc.Duplicate = true
			return nil
		}
		if rc.Status != StatusPending {
			return nil
		}
		if _, err := s.jobs.InsertTx(ctx, tx, EventArgs{EventID: ev.ID, CustomerID: customer}, nil); err != nil {
			return fmt.Errorf("billing: enqueue event: %w", err)
		}
		return nil
	})
	if err != nil {
		s.m.webhook.WithLabelValues(typeLabel(string(ev.Type)), "unavailable").Inc()
		s.log.WarnContext(ctx, "stripe event not stored", "event_id", ev.ID, "err", err)
		return Receipt{}, apperr.New(apperr.Unavailable, "the event could not be stored; Stripe will retry")
	}
	switch {
	case rc.Duplicate:
		rc.Status = ""
		s.m.webhook.WithLabelValues(typeLabel(rc.Type), "duplicate").Inc()
	case rc.Status == StatusIgnored:
		s.m.webhook.WithLabelValues(typeLabel(rc.Type), "ignored_api_version").Inc()
		s.log.WarnContext(ctx, "stripe event on another api version stored and not processed",
			"event_id", ev.ID, "api_version", ev.APIVersion, "want_api_version", stripe.APIVersion)
	default:
		s.m.webhook.WithLabelValues(typeLabel(rc.Type), "stored").Inc()
	}
	return rc, nil
}

// CountTooLarge records a body refused for its size (the handler reads it).
func (s *Service) CountTooLarge() { s.m.webhook.WithLabelValues("unknown", "too_large").Inc() }

// verify checks the signature with the current secret, then the previous
// one, and the timestamp in both directions.
func (s *Service) verify(body []byte, header string) (stripe.Event, error) {
	opts := webhook.ConstructEventOptions{Tolerance: SignatureTolerance, IgnoreAPIVersionMismatch: true}
	ev, err := webhook.ConstructEventWithOptions(body, header, s.opts.WebhookSecret, opts)
	if errors.Is(err, webhook.ErrNoValidSignature) && s.opts.WebhookSecretPrevious != "" {
		ev, err = webhook.ConstructEventWithOptions(body, header, s.opts.WebhookSecretPrevious, opts)
	}
	switch {
	case errors.Is(err, webhook.ErrNotSigned):
		return ev, apperr.New(apperr.Invalid, "missing Stripe-Signature header")
	case errors.Is(err, webhook.ErrInvalidHeader):
		return ev, apperr.New(apperr.Invalid, "malformed Stripe-Signature header")
	case errors.Is(err, webhook.ErrNoValidSignature):
		return ev, apperr.New(apperr.Invalid, "no valid v1 signature in Stripe-Signature for this endpoint's secret")
	case errors.Is(err, webhook.ErrTooOld):
		return ev, apperr.New(apperr.Invalid, "Stripe-Signature timestamp is more than %s old", SignatureTolerance)
	case err != nil:
		return ev, apperr.New(apperr.Invalid, "body is not a Stripe event: %v", err)
	}
	// stripe-go's tolerance is one-sided: a timestamp far ahead passes it.
	if ts, ok := signatureTime(header); !ok || ts.After(s.opts.Now().Add(SignatureTolerance)) {
		return ev, apperr.New(apperr.Invalid, "Stripe-Signature timestamp is more than %s ahead", SignatureTolerance)
	}
	if !strings.HasPrefix(ev.ID, "evt_") || ev.Type == "" || ev.Created <= 0 || ev.Data == nil || len(ev.Data.Raw) == 0 || ev.Data.Raw[0] != '{' ||
		(ev.Object != "" && ev.Object != "event") {
		return ev, apperr.New(apperr.Invalid, "body is not a Stripe event: it needs an evt_ id, a type, created and data.object")
	}
	return ev, nil
}

// signatureTime reads t= of a Stripe-Signature header (already verified).
func signatureTime(header string) (time.Time, bool) {
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(part, "t="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(n, 0), true
		}
	}
	return time.Time{}, false
}

// customerOf finds the Stripe customer an event is about: data.object's
// customer (an id or an expanded object), or the object itself when it is a
// customer.
func customerOf(ev stripe.Event) string {
	var o struct {
		Object   string          `json:"object"`
		ID       string          `json:"id"`
		Customer json.RawMessage `json:"customer"`
	}
	if err := json.Unmarshal(ev.Data.Raw, &o); err != nil {
		return ""
	}
	if o.Object == "customer" {
		return o.ID
	}
	if len(o.Customer) == 0 || string(o.Customer) == "null" {
		return ""
	}
	var id string
	if json.Unmarshal(o.Customer, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(o.Customer, &obj) == nil {
		return obj.ID
	}
	return ""
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// jsonbSafe replaces the JSON escape \u0000 with \ufffd: Postgres's jsonb
// cannot hold a NUL character, and an event it refuses would be answered 503
// on every one of Stripe's retries for days. Only a real escape is touched
// (an odd run of backslashes before the u), never an escaped backslash
// followed by the text "u0000".
func jsonbSafe(body []byte) []byte {
	const nul = `\u0000`
	if !bytes.Contains(body, []byte(nul)) {
		return body
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		if body[i] == '\\' && bytes.HasPrefix(body[i:], []byte(nul)) {
			run := 0
			for j := i; j >= 0 && body[j] == '\\'; j-- {
				run++
			}
			if run%2 == 1 {
				out = append(out, `\ufffd`...)
				i += len(nul) - 1
				continue
			}
		}
		out = append(out, body[i])
	}
	return out
}
