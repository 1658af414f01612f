package credits

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Sources of a grant.
const (
	SourceAdmin        = "admin"         // POST /admin/v1/tenants/{id}/grants
	SourceTopup        = "topup"         // a Stripe purchase of a mapped one-time price
	SourceStripeCredit = "stripe_credit" // a Stripe billing credit grant, mirrored
	SourceRollover     = "rollover"      // unused included units of a closed period
)

// Priorities: a lower number is drawn first, as Stripe's credit grants.
const (
	MinPriority     = 0
	MaxPriority     = 100
	DefaultPriority = 50
)

// MaxAmount bounds a grant (and a top-up's amount × quantity), as usage
// events bound their quantities: sums of many cannot overflow.
const MaxAmount = 1_000_000_000_000

// Statuses of a grant, as answered (derived, never stored).
const (
	StatusPending  = "pending"  // effective_at is ahead
	StatusActive   = "active"   // drawable
	StatusDepleted = "depleted" // nothing remaining, not closed
	StatusExpired  = "expired"
	StatusVoided   = "voided"
)

var meterRe = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

const maxReasonLen = 500

// ErrNotFound is a grant that does not exist.
var ErrNotFound = apperr.New(apperr.NotFound, "grant not found")

// UnknownMeterError is a grant of a meter no plan defines: 422, as
// POST /v1/check answers such a meter (a typo would otherwise be a grant
// nothing ever draws).
type UnknownMeterError struct{ Meter string }

func (e *UnknownMeterError) Error() string {
	return fmt.Sprintf("no plan defines the meter %q", e.Meter)
}

// Unwrap classifies it for apperr: Unprocessable, naming the field.
func (e *UnknownMeterError) Unwrap() error {
	return &apperr.Error{Code: apperr.Unprocessable, Message: e.Error(),
		Fields: []apperr.FieldError{{Field: "meter", Message: e.Error()}}}
}

// Grant is a stored grant. Amount = Consumed + Remaining + Expired + Voided,
// always. A grant whose expiry has passed is answered expired (what was
// left moved to Expired) even before the expiry job has written it.
type Grant struct {
	ID          string     `json:"id"`
	TenantID    string     `json:"tenant_id"`
	Meter       string     `json:"meter"`
	Amount      int64      `json:"amount"`
	Remaining   int64      `json:"remaining"`
	Consumed    int64      `json:"consumed"`
	Expired     int64      `json:"expired"`
	Voided      int64      `json:"voided"`
	Priority    int        `json:"priority"`
	EffectiveAt time.Time  `json:"effective_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	Source      string     `json:"source"`
	Reason      string     `json:"reason"`
	VoidedAt    *time.Time `json:"voided_at"`
	ExpiredAt   *time.Time `json:"expired_at"`
	CreatedAt   time.Time  `json:"created_at"`
	Status      string     `json:"status"`
}

// GrantInput is the body of POST /admin/v1/tenants/{id}/grants.
type GrantInput struct {
	Meter       string     `json:"meter"`
	Amount      *int64     `json:"amount"`
	Priority    *int       `json:"priority"`     // default DefaultPriority
	EffectiveAt *time.Time `json:"effective_at"` // default now
	ExpiresAt   *time.Time `json:"expires_at"`   // default never
	Reason      string     `json:"reason"`
}

// UnmarshalJSON decodes strictly (unknown fields refused) and names a
// timestamp that is not RFC 3339 (encoding/json's error would not).
func (in *GrantInput) UnmarshalJSON(b []byte) error {
	var aux struct {
		Meter       string          `json:"meter"`
		Amount      *int64          `json:"amount"`
		Priority    *int            `json:"priority"`
		EffectiveAt json.RawMessage `json:"effective_at"`
		ExpiresAt   json.RawMessage `json:"expires_at"`
		Reason      string          `json:"reason"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&aux); err != nil {
		return err
	}
	var v apperr.Validation
	*in = GrantInput{Meter: aux.Meter, Amount: aux.Amount, Priority: aux.Priority, Reason: aux.Reason,
		EffectiveAt: timeField(&v, "effective_at", aux.EffectiveAt), ExpiresAt: timeField(&v, "expires_at", aux.ExpiresAt)}
	return v.Err()
}

// timeField decodes an optional RFC 3339 timestamp; null or absent is nil.
func timeField(v *apperr.Validation, field string, raw json.RawMessage) *time.Time {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var t time.Time
	if err := json.Unmarshal(raw, &t); err != nil {
		v.Add(field, "must be an RFC 3339 timestamp (2026-12-31T00:00:00Z)")
		return nil
	}
	return &t
}

// Validate checks every field against now, naming each bad one.
func (in *GrantInput) Validate(now time.Time) error {
	var v apperr.Validation
	if !meterRe.MatchString(in.Meter) {
		v.Add("meter", "must be a meter name [a-z0-9_.-]{1,64}")
	}
	switch {
	case in.Amount == nil:
		v.Add("amount", "is required: the units the grant gives, a whole number greater than 0")
	case *in.Amount <= 0:
		v.Add("amount", "must be greater than 0")
	case *in.Amount > MaxAmount:
		v.Add("amount", "must be at most %d", int64(MaxAmount))
	}
	if in.Priority != nil && (*in.Priority < MinPriority || *in.Priority > MaxPriority) {
		v.Add("priority", "must be from %d (drawn first) to %d (drawn last)", MinPriority, MaxPriority)
	}
	eff := now
	if in.EffectiveAt != nil {
		eff = *in.EffectiveAt
	}
	if in.ExpiresAt != nil {
		switch {
		case !in.ExpiresAt.After(eff):
			v.Add("expires_at", "must be after effective_at (%s)", eff.UTC().Format(time.RFC3339))
		case !in.ExpiresAt.After(now):
			v.Add("expires_at", "must be in the future")
		}
	}
	validReason(&v, in.Reason)
	return v.Err()
}

func validReason(v *apperr.Validation, reason string) {
	if len([]rune(reason)) > maxReasonLen {
		v.Add("reason", "must be at most %d characters", maxReasonLen)
	} else if strings.ContainsFunc(reason, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) {
		v.Add("reason", "must not contain control characters")
	}
}

// NewGrant is a grant as its source makes it. A SourceRef makes creation
// idempotent: a second grant of the same source and ref is the first one.
type NewGrant struct {
	TenantID    string
	Meter       string
	Amount      int64
	Priority    int
	EffectiveAt time.Time
	ExpiresAt   *time.Time
	Source      string
	SourceRef   string
	Reason      string
}

const grantCols = `id::text, tenant_id::text, meter, amount, remaining, consumed, expired, voided, priority,
effective_at, expires_at, source, reason, voided_at, expired_at, created_at`

func scanGrant(now time.Time) pgx.RowToFunc[Grant] {
	return func(row pgx.CollectableRow) (Grant, error) {
		var g Grant
		err := row.Scan(&g.ID, &g.TenantID, &g.Meter, &g.Amount, &g.Remaining, &g.Consumed, &g.Expired, &g.Voided, &g.Priority,
			&g.EffectiveAt, &g.ExpiresAt, &g.Source, &g.Reason, &g.VoidedAt, &g.ExpiredAt, &g.CreatedAt)
		if err != nil {
			return g, err
		}
		g.present(now)
		return g, nil
	}
}

// present fills Status and shows an expiry that has passed but is not
// written yet as the expiry job will write it.
func (g *Grant) present(now time.Time) {
	g.EffectiveAt, g.CreatedAt = g.EffectiveAt.UTC(), g.CreatedAt.UTC()
	for _, p := range []**time.Time{&g.ExpiresAt, &g.VoidedAt, &g.ExpiredAt} {
		if *p != nil {
			u := (**p).UTC()
			*p = &u
		}
	}
	if g.VoidedAt == nil && g.ExpiredAt == nil && g.ExpiresAt != nil && !g.ExpiresAt.After(now) {
		g.Expired += g.Remaining
		g.Remaining = 0
		at := *g.ExpiresAt
		g.ExpiredAt = &at
	}
	switch {
	case g.VoidedAt != nil:
		g.Status = StatusVoided
	case g.ExpiredAt != nil:
		g.Status = StatusExpired
	case g.EffectiveAt.After(now):
		g.Status = StatusPending
	case g.Remaining == 0:
		g.Status = StatusDepleted
	default:
		g.Status = StatusActive
	}
}

// Create issues an admin grant to a tenant.
func (s *Service) Create(ctx context.Context, tenantID string, in GrantInput) (Grant, error) {
	now := s.now()
	if err := in.Validate(now); err != nil {
		return Grant{}, err
	}
	if _, err := s.ents.GetTenantRow(ctx, tenantID); err != nil {
		return Grant{}, fmt.Errorf("credits: %w", err)
	}
	if err := s.checkMeter(ctx, in.Meter); err != nil {
		return Grant{}, err
	}
	g := NewGrant{TenantID: tenantID, Meter: in.Meter, Amount: *in.Amount, Priority: DefaultPriority,
		EffectiveAt: now, ExpiresAt: in.ExpiresAt, Source: SourceAdmin, Reason: strings.TrimSpace(in.Reason)}
	if in.Priority != nil {
		g.Priority = *in.Priority
	}
	if in.EffectiveAt != nil {
		g.EffectiveAt = *in.EffectiveAt
	}
	out, _, err := s.createTx(ctx, s.db, g)
	if err == nil {
		// committed: the limiter draws it from its next decision on (a
		// failed write is logged, and the worker's sweep writes it)
		_ = s.Publish(ctx, tenantID)
	}
	return out, err
}

// checkMeter refuses a meter no plan defines, as POST /v1/check does
// ("requests", the limiter's default meter, is always known).
func (s *Service) checkMeter(ctx context.Context, meter string) error {
	if meter == keyspace.DefaultMeter {
		return nil
	}
	ok, err := s.cat.MeterDefined(ctx, meter)
	if err != nil {
		return fmt.Errorf("credits: %w", err)
	}
	if !ok {
		return &UnknownMeterError{Meter: meter}
	}
	return nil
}

// CreateTx stores g in the caller's transaction (a Stripe event's, a
// period close's). With a SourceRef it is idempotent: created is false and
// the grant is the one stored before.
func (s *Service) CreateTx(ctx context.Context, q postgres.Querier, g NewGrant) (Grant, bool, error) {
	var v apperr.Validation
	if !meterRe.MatchString(g.Meter) {
		v.Add("meter", "must be a meter name [a-z0-9_.-]{1,64}")
	}
	if g.Amount <= 0 || g.Amount > MaxAmount {
		v.Add("amount", "must be from 1 to %d", int64(MaxAmount))
	}
	if g.Priority < MinPriority || g.Priority > MaxPriority {
		v.Add("priority", "must be from %d to %d", MinPriority, MaxPriority)
	}
	if g.EffectiveAt.IsZero() {
		g.EffectiveAt = s.now()
	}
	if g.ExpiresAt != nil && !g.ExpiresAt.After(g.EffectiveAt) {
		v.Add("expires_at", "must be after effective_at")
	}
	switch g.Source {
	case SourceAdmin, SourceTopup, SourceStripeCredit, SourceRollover:
	default:
		v.Add("source", "unknown source %q", g.Source)
	}
	validReason(&v, g.Reason)
	if err := v.Err(); err != nil {
		return Grant{}, false, err
	}
	return s.createTx(ctx, q, g)
}

func (s *Service) createTx(ctx context.Context, q postgres.Querier, g NewGrant) (Grant, bool, error) {
	defer s.forgetGrowth()
	if !ids.IsUUID(g.TenantID) {
		return Grant{}, false, apperr.New(apperr.NotFound, "no tenant %q", g.TenantID)
	}
	var ref *string
	if g.SourceRef != "" {
		ref = &g.SourceRef
	}
	now := s.now()
	rows, err := q.Query(ctx, `
INSERT INTO credit_grants (tenant_id, meter, amount, remaining, priority, effective_at, expires_at, source, source_ref, reason, created_at, updated_at)
VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $8, $9, $10, $10)
ON CONFLICT ON CONSTRAINT credit_grants_source_ref DO NOTHING
RETURNING `+grantCols,
		g.TenantID, g.Meter, g.Amount, g.Priority, g.EffectiveAt, g.ExpiresAt, g.Source, ref, g.Reason, now)
	if err != nil {
		return Grant{}, false, fmt.Errorf("credits: create grant: %w", err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanGrant(now))
	if errors.Is(err, pgx.ErrNoRows) && ref != nil {
		// Made before, by the same purchase, credit grant or period.
		rows, err := q.Query(ctx, `SELECT `+grantCols+` FROM credit_grants WHERE source = $1 AND source_ref = $2`, g.Source, g.SourceRef)
		if err != nil {
			return Grant{}, false, fmt.Errorf("credits: create grant: %w", err)
		}
		out, err := pgx.CollectExactlyOneRow(rows, scanGrant(now))
		if err != nil {
			return Grant{}, false, fmt.Errorf("credits: create grant: %w", err)
		}
		return out, false, nil
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" {
			return Grant{}, false, apperr.New(apperr.NotFound, "no tenant %q", g.TenantID)
		}
		return Grant{}, false, fmt.Errorf("credits: create grant: %w", err)
	}
	return out, true, nil
}

// List returns a tenant's grants, active and past, oldest first.
func (s *Service) List(ctx context.Context, tenantID string) ([]Grant, error) {
	if _, err := s.ents.GetTenantRow(ctx, tenantID); err != nil {
		return nil, fmt.Errorf("credits: %w", err)
	}
	now := s.now()
	rows, err := s.db.Query(ctx, `SELECT `+grantCols+` FROM credit_grants WHERE tenant_id = $1 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("credits: list grants: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanGrant(now))
	if err != nil {
		return nil, fmt.Errorf("credits: list grants: %w", err)
	}
	if out == nil {
		out = []Grant{}
	}
	return out, nil
}

// Get returns one grant.
func (s *Service) Get(ctx context.Context, id string) (Grant, error) {
	return s.get(ctx, s.db, id, false)
}

func (s *Service) get(ctx context.Context, q postgres.Querier, id string, lock bool) (Grant, error) {
	if !ids.IsUUID(id) {
		return Grant{}, ErrNotFound
	}
	sql := `SELECT ` + grantCols + ` FROM credit_grants WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	rows, err := q.Query(ctx, sql, id)
	if err != nil {
		return Grant{}, fmt.Errorf("credits: get grant: %w", err)
	}
	g, err := pgx.CollectExactlyOneRow(rows, scanGrant(s.now()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Grant{}, ErrNotFound
	}
	if err != nil {
		return Grant{}, fmt.Errorf("credits: get grant: %w", err)
	}
	return g, nil
}

// TenantOf is the tenant a grant belongs to ("" when there is no such
// grant), for the audit trail.
func (s *Service) TenantOf(ctx context.Context, id string) string {
	g, err := s.Get(ctx, id)
	if err != nil {
		return ""
	}
	return g.TenantID
}

// State is a grant as the audit trail records it before and after a
// change; nil when there is none.
func (s *Service) State(ctx context.Context, id string) json.RawMessage {
	g, err := s.Get(ctx, id)
	if err != nil {
		return nil
	}
	b, err := json.Marshal(g)
	if err != nil {
		return nil
	}
	return b
}

// Void closes a grant at once: what remains moves to Voided, and nothing is
// drawn from it any more (the limiter stops within a second: Publish).
// Voiding a voided grant answers it as it is; an expired grant has nothing
// left to void (409).
func (s *Service) Void(ctx context.Context, id string) (Grant, error) {
	defer s.forgetGrowth()
	if !ids.IsUUID(id) {
		return Grant{}, ErrNotFound
	}
	var out Grant
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		g, err := s.get(ctx, tx, id, true)
		if err != nil {
			return err
		}
		now := s.now()
		switch {
		case g.VoidedAt != nil:
			out = g
			return nil
		case g.ExpiredAt != nil:
			return apperr.New(apperr.Conflict, "grant %s expired at %s; nothing is left to void", id, g.ExpiredAt.Format(time.RFC3339))
		}
		rows, err := tx.Query(ctx, `
UPDATE credit_grants SET voided = voided + remaining, remaining = 0, voided_at = $2, updated_at = $2
 WHERE id = $1 RETURNING `+grantCols, id, now)
		if err != nil {
			return fmt.Errorf("credits: void grant: %w", err)
		}
		out, err = pgx.CollectExactlyOneRow(rows, scanGrant(now))
		if err != nil {
			return fmt.Errorf("credits: void grant: %w", err)
		}
		return nil
	})
	if err != nil {
		return Grant{}, err
	}
	// the limiter stops drawing it once its near-caches read the new list
	// (an invalidation: within a second)
	_ = s.Publish(ctx, out.TenantID)
	return out, nil
}

// CanGrow says whether units beyond its plan's included quota can reach a
// tenant's meter: a grant of it that is in effect or not yet in effect and
// has units left, or a top-up of it to buy. A cost over the included quota
// is then worth waiting or paying for, so the API answers its refusal 429
// instead of "can never be admitted" (422).
//
// The answer is kept for canGrowTTL per tenant and meter: it is asked on a
// refusal, which a client can send as often as it likes, and each would
// otherwise cost Postgres a query. A grant or top-up this process changes
// drops the cache; one another process made turns a 422 into a 429 up to
// canGrowTTL later.
func (s *Service) CanGrow(ctx context.Context, tenantID, meter string) (bool, error) {
	if !ids.IsUUID(tenantID) {
		return false, nil
	}
	key, now := tenantID+"\x00"+meter, time.Now()
	s.growMu.Lock()
	e, hit := s.grow[key]
	s.growMu.Unlock()
	if hit && now.Before(e.until) {
		return e.ok, nil
	}
	ok, err := s.canGrow(ctx, tenantID, meter)
	if err != nil {
		return false, err
	}
	s.growMu.Lock()
	if s.grow == nil || len(s.grow) >= canGrowMax {
		s.grow = map[string]canGrowEntry{} // bounded: start over
	}
	s.grow[key] = canGrowEntry{ok: ok, until: now.Add(canGrowTTL)}
	s.growMu.Unlock()
	return ok, nil
}

// forgetGrowth drops CanGrow's cache: this process changed a grant or a
// top-up (other processes' changes are seen within canGrowTTL).
func (s *Service) forgetGrowth() {
	s.growMu.Lock()
	s.grow = nil
	s.growMu.Unlock()
}

// canGrowTTL and canGrowMax bound CanGrow's cache.
const (
	canGrowTTL = 2 * time.Second
	canGrowMax = 10000
)

type canGrowEntry struct {
	ok    bool
	until time.Time
}

func (s *Service) canGrow(ctx context.Context, tenantID, meter string) (bool, error) {
	var ok bool
	err := s.db.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM credit_grants
                WHERE tenant_id = $1 AND meter = $2 AND voided_at IS NULL AND expired_at IS NULL
                  AND (expires_at IS NULL OR expires_at > $3) AND remaining > 0)
    OR EXISTS (SELECT 1 FROM credit_topups WHERE meter = $2)`, tenantID, meter, s.now()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("credits: can %s grow: %w", meter, err)
	}
	return ok, nil
}
