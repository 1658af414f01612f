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
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
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
	rc := Receipt{ID: ev.ID, Type: ev.Type, Status: StatusPending}
	// Every API version is processed: fields are read version-tolerantly
	// (or the object is fetched at the pinned version), never guessed at.
	var reason *string
	customer := customerOf(ev.Object)
	// A database that hangs rather than refuses must still get Stripe a 503
	// well before its own delivery timeout, so that it retries.
	ctx, cancel := context.WithTimeout(ctx, intakeTimeout)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO stripe_events (id, type, api_version, livemode, stripe_customer_id, event_created, payload, status, ignored_reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO NOTHING`,
			ev.ID, ev.Type, ev.APIVersion, ev.Livemode, nullable(customer), ev.Created,
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
		s.m.webhook.WithLabelValues(typeLabel(ev.Type), "unavailable").Inc()
		s.log.WarnContext(ctx, "stripe event not stored", "event_id", ev.ID, "err", err)
		return Receipt{}, apperr.New(apperr.Unavailable, "the event could not be stored; Stripe will retry")
	}
	switch {
	case rc.Duplicate:
		rc.Status = ""
		s.m.webhook.WithLabelValues(typeLabel(rc.Type), "duplicate").Inc()
	default:
		s.m.webhook.WithLabelValues(typeLabel(rc.Type), "stored").Inc()
	}
	return rc, nil
}

// CountTooLarge records a body refused for its size (the handler reads it).
func (s *Service) CountTooLarge() { s.m.webhook.WithLabelValues("unknown", "too_large").Inc() }

// thinObject is the object of v2 thin event notifications (for example
// v1.billing.meter.error_report_triggered): they carry a reference, not a
// snapshot, and an RFC 3339 created time.
const thinObject = "v2.core.event"

// envelope is a verified event as the intake reads it, for any API version
// and for thin events.
type envelope struct {
	ID         string
	Type       string
	APIVersion string
	Livemode   bool
	Created    time.Time
	Object     json.RawMessage // data.object; nil for thin events
	Thin       bool
}

// verify checks the signature with the current secret, then the previous
// one, and the timestamp in both directions, then reads the envelope.
func (s *Service) verify(body []byte, header string) (envelope, error) {
	var ev envelope
	if n := strings.Count(","+strings.ReplaceAll(header, " ", ""), ",t="); n > 1 {
		// Which timestamp was signed would be ambiguous (stripe-go takes
		// the last one, others the first): refuse rather than pick.
		return ev, apperr.New(apperr.Invalid, "Stripe-Signature has %d t= timestamps; exactly one is allowed", n)
	}
	err := webhook.ValidatePayloadWithTolerance(body, header, s.opts.WebhookSecret, SignatureTolerance)
	if errors.Is(err, webhook.ErrNoValidSignature) && s.opts.WebhookSecretPrevious != "" {
		err = webhook.ValidatePayloadWithTolerance(body, header, s.opts.WebhookSecretPrevious, SignatureTolerance)
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
		return ev, apperr.New(apperr.Invalid, "Stripe-Signature: %v", err)
	}
	// stripe-go's tolerance is one-sided: a timestamp far ahead passes it.
	if ts, ok := signatureTime(header); !ok || ts.After(s.opts.Now().Add(SignatureTolerance)) {
		return ev, apperr.New(apperr.Invalid, "Stripe-Signature timestamp is more than %s ahead", SignatureTolerance)
	}
	var raw struct {
		ID         string          `json:"id"`
		Object     string          `json:"object"`
		Type       string          `json:"type"`
		APIVersion string          `json:"api_version"`
		Livemode   bool            `json:"livemode"`
		Created    json.RawMessage `json:"created"`
		Data       *struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return ev, apperr.New(apperr.Invalid, "body is not a Stripe event: %v", err)
	}
	ev = envelope{ID: raw.ID, Type: raw.Type, APIVersion: raw.APIVersion, Livemode: raw.Livemode, Thin: raw.Object == thinObject}
	if ev.Thin {
		var at time.Time
		if json.Unmarshal(raw.Created, &at) != nil || !strings.HasPrefix(ev.ID, "evt_") || ev.Type == "" {
			return ev, apperr.New(apperr.Invalid, "body is not a Stripe thin event: it needs an evt_ id, a type and an RFC 3339 created")
		}
		ev.Created = at.UTC()
		return ev, nil
	}
	var created int64
	if json.Unmarshal(raw.Created, &created) != nil {
		created = 0
	}
	if !strings.HasPrefix(ev.ID, "evt_") || ev.Type == "" || created <= 0 || raw.Data == nil || len(raw.Data.Object) == 0 || raw.Data.Object[0] != '{' ||
		(raw.Object != "" && raw.Object != "event") {
		return ev, apperr.New(apperr.Invalid, "body is not a Stripe event: it needs an evt_ id, a type, created and data.object")
	}
	ev.Created, ev.Object = time.Unix(created, 0).UTC(), raw.Data.Object
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
func customerOf(object json.RawMessage) string {
	var o struct {
		Object   string          `json:"object"`
		ID       string          `json:"id"`
		Customer json.RawMessage `json:"customer"`
	}
	if len(object) == 0 || json.Unmarshal(object, &o) != nil {
		return ""
	}
	if o.Object == "customer" {
		return o.ID
	}
	return expandable(o.Customer)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// jsonbSafe makes a verified body storable in Postgres's jsonb, which
// refuses invalid UTF-8, the escape \u0000 and unpaired UTF-16 surrogate
// escapes (\ud800 alone); a body it refused would be answered 503 on every
// one of Stripe's retries for days. Each of those becomes U+FFFD, which is
// also what Go's JSON decoder reads them as, so the stored event means what
// the verified one meant. Valid escapes (surrogate pairs included) and
// escaped backslashes are left alone.
func jsonbSafe(body []byte) []byte {
	if utf8.Valid(body) && !bytes.Contains(body, []byte(`\u`)) {
		return body
	}
	body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	const repl = `\ufffd`
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' || i+1 >= len(body) {
			out = append(out, body[i])
			continue
		}
		if body[i+1] != 'u' {
			out = append(out, body[i], body[i+1]) // \\, \" and the like
			i++
			continue
		}
		r, ok := hex4(body[i+2:])
		switch {
		case !ok:
			out = append(out, body[i], body[i+1])
			i++
			continue
		case r == 0 || (r >= 0xDC00 && r <= 0xDFFF):
			out = append(out, repl...)
		case r >= 0xD800 && r <= 0xDBFF:
			if len(body) >= i+12 && body[i+6] == '\\' && body[i+7] == 'u' {
				if lo, ok := hex4(body[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					out = append(out, body[i:i+12]...)
					i += 11
					continue
				}
			}
			out = append(out, repl...)
		default:
			out = append(out, body[i:i+6]...)
		}
		i += 5
	}
	return out
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
