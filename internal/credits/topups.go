package credits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Top-ups: a one-time Stripe price mapped to units of a meter. A purchase
// of the price (a paid Checkout Session in payment mode, or a paid invoice
// with it as a line; billing decides what an event means) grants quantity
// × amount units, once per purchase.

// MaxTopupExpiry bounds expires_in (ten years).
const MaxTopupExpiry = 10 * 365 * 24 * time.Hour

// Topup maps a Stripe price to a grant.
type Topup struct {
	PriceID string `json:"price_id"`
	Meter   string `json:"meter"`
	Amount  int64  `json:"amount"`
	// ExpiresIn is how long after the purchase the grant expires, as a Go
	// duration ("720h"); null never expires.
	ExpiresIn *string   `json:"expires_in"`
	Priority  int       `json:"priority"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TopupInput is the body of PUT /admin/v1/topups/{price_id}.
type TopupInput struct {
	Meter     string  `json:"meter"`
	Amount    *int64  `json:"amount"`
	ExpiresIn *string `json:"expires_in"` // default never
	Priority  *int    `json:"priority"`   // default DefaultPriority
}

// Validate checks every field, naming each bad one.
func (in *TopupInput) Validate(priceID string) (expiresIn time.Duration, err error) {
	var v apperr.Validation
	if priceID == "" || len(priceID) > 255 || strings.ContainsFunc(priceID, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		v.Add("price_id", "must be a Stripe price id (price_…), at most 255 characters")
	}
	if !meterRe.MatchString(in.Meter) {
		v.Add("meter", "must be a meter name [a-z0-9_.-]{1,64}")
	}
	switch {
	case in.Amount == nil:
		v.Add("amount", "is required: the units one unit of quantity buys")
	case *in.Amount <= 0:
		v.Add("amount", "must be greater than 0")
	case *in.Amount > MaxAmount:
		v.Add("amount", "must be at most %d", int64(MaxAmount))
	}
	if in.ExpiresIn != nil {
		d, perr := time.ParseDuration(*in.ExpiresIn)
		switch {
		case perr != nil:
			v.Add("expires_in", "must be a duration such as 720h (Go syntax: h, m, s)")
		case d <= 0:
			v.Add("expires_in", "must be greater than 0 (omit it for a grant that never expires)")
		case d > MaxTopupExpiry:
			v.Add("expires_in", "must be at most %s", MaxTopupExpiry)
		default:
			expiresIn = d
		}
	}
	if in.Priority != nil && (*in.Priority < MinPriority || *in.Priority > MaxPriority) {
		v.Add("priority", "must be from %d (drawn first) to %d (drawn last)", MinPriority, MaxPriority)
	}
	return expiresIn, v.Err()
}

// ErrTopupNotFound is a price mapped to no top-up.
var ErrTopupNotFound = apperr.New(apperr.NotFound, "top-up not found")

const topupCols = `stripe_price_id, meter, amount, expires_in_seconds, priority, created_at, updated_at`

func scanTopup(row pgx.CollectableRow) (Topup, error) {
	var t Topup
	var secs *int64
	if err := row.Scan(&t.PriceID, &t.Meter, &t.Amount, &secs, &t.Priority, &t.CreatedAt, &t.UpdatedAt); err != nil {
		return t, err
	}
	if secs != nil {
		s := (time.Duration(*secs) * time.Second).String()
		t.ExpiresIn = &s
	}
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	return t, nil
}

// PutTopup maps priceID to a grant, replacing an earlier mapping; created
// says whether it is new. A meter no plan defines is refused (422).
func (s *Service) PutTopup(ctx context.Context, priceID string, in TopupInput) (Topup, bool, error) {
	defer s.forgetGrowth()
	exp, err := in.Validate(priceID)
	if err != nil {
		return Topup{}, false, err
	}
	if err := s.checkMeter(ctx, in.Meter); err != nil {
		return Topup{}, false, err
	}
	var secs *int64
	if exp > 0 {
		n := int64((exp + time.Second - 1) / time.Second)
		secs = &n
	}
	prio := DefaultPriority
	if in.Priority != nil {
		prio = *in.Priority
	}
	now := s.now()
	rows, err := s.db.Query(ctx, `
INSERT INTO credit_topups (stripe_price_id, meter, amount, expires_in_seconds, priority, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (stripe_price_id) DO UPDATE SET meter = EXCLUDED.meter, amount = EXCLUDED.amount,
  expires_in_seconds = EXCLUDED.expires_in_seconds, priority = EXCLUDED.priority, updated_at = EXCLUDED.updated_at
RETURNING `+topupCols+`, (xmax = 0)`, priceID, in.Meter, *in.Amount, secs, prio, now)
	if err != nil {
		return Topup{}, false, fmt.Errorf("credits: put top-up: %w", err)
	}
	var created bool
	t, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Topup, error) {
		var t Topup
		var secs *int64
		err := row.Scan(&t.PriceID, &t.Meter, &t.Amount, &secs, &t.Priority, &t.CreatedAt, &t.UpdatedAt, &created)
		if secs != nil {
			d := (time.Duration(*secs) * time.Second).String()
			t.ExpiresIn = &d
		}
		t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
		return t, err
	})
	if err != nil {
		return Topup{}, false, fmt.Errorf("credits: put top-up: %w", err)
	}
	return t, created, nil
}

// ListTopups returns every mapped price, by price id.
func (s *Service) ListTopups(ctx context.Context) ([]Topup, error) {
	rows, err := s.db.Query(ctx, `SELECT `+topupCols+` FROM credit_topups ORDER BY stripe_price_id`)
	if err != nil {
		return nil, fmt.Errorf("credits: list top-ups: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanTopup)
	if err != nil {
		return nil, fmt.Errorf("credits: list top-ups: %w", err)
	}
	if out == nil {
		out = []Topup{}
	}
	return out, nil
}

// GetTopup returns one mapping.
func (s *Service) GetTopup(ctx context.Context, priceID string) (Topup, error) {
	rows, err := s.db.Query(ctx, `SELECT `+topupCols+` FROM credit_topups WHERE stripe_price_id = $1`, priceID)
	if err != nil {
		return Topup{}, fmt.Errorf("credits: get top-up: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTopup)
	if errors.Is(err, pgx.ErrNoRows) {
		return Topup{}, ErrTopupNotFound
	}
	if err != nil {
		return Topup{}, fmt.Errorf("credits: get top-up: %w", err)
	}
	return t, nil
}

// TopupState is a mapping as the audit trail records it; nil when the
// price is mapped to none.
func (s *Service) TopupState(ctx context.Context, priceID string) json.RawMessage {
	t, err := s.GetTopup(ctx, priceID)
	if err != nil {
		return nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil
	}
	return b
}

// DeleteTopup removes a mapping; grants it made stay.
func (s *Service) DeleteTopup(ctx context.Context, priceID string) error {
	defer s.forgetGrowth()
	tag, err := s.db.Exec(ctx, `DELETE FROM credit_topups WHERE stripe_price_id = $1`, priceID)
	if err != nil {
		return fmt.Errorf("credits: delete top-up: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrTopupNotFound
	}
	return nil
}

// HasTopups says whether any price is mapped, so that billing reads a
// payment's line items from Stripe only when one could be a top-up.
func (s *Service) HasTopups(ctx context.Context) (bool, error) {
	var ok bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM credit_topups)`).Scan(&ok); err != nil {
		return false, fmt.Errorf("credits: top-ups: %w", err)
	}
	return ok, nil
}

// PurchaseLine is one price bought, with its quantity.
type PurchaseLine struct {
	PriceID  string
	Quantity int64
}

// Purchase is one payment as billing understood it.
type Purchase struct {
	TenantID string
	// Keys are every Stripe id the purchase is known by: the Checkout
	// Session, the invoice it created, the payment intent. Two events
	// sharing any key are the same purchase.
	Keys  []string
	Lines []PurchaseLine
	// At is when it was paid (the event's created time): expiries count
	// from it.
	At time.Time
}

// PurchaseResult says what a purchase granted.
type PurchaseResult struct {
	// Grants made now, one per mapped price (none for a purchase granted
	// before, or one that bought no mapped price).
	Grants []Grant
	// Already: an earlier event of the same purchase granted it.
	Already bool
	// Unmapped are the prices bought that map to no top-up.
	Unmapped []string
}

// GrantPurchaseTx grants a purchase in the caller's transaction (the
// Stripe event's), once: the purchase's keys are locked (in order, so two
// events of one purchase take turns), and a purchase any of whose keys was
// granted before only records the keys it adds. A purchase that buys no
// mapped price records nothing, so a replay after its price is mapped
// grants it.
func (s *Service) GrantPurchaseTx(ctx context.Context, tx pgx.Tx, p Purchase) (PurchaseResult, error) {
	var res PurchaseResult
	keys := slices.Compact(slices.Sorted(slices.Values(slices.DeleteFunc(slices.Clone(p.Keys), func(k string) bool { return k == "" }))))
	if len(keys) == 0 {
		return res, errors.New("credits: a purchase needs at least one Stripe id")
	}
	for _, k := range keys {
		if err := postgres.XactLock(ctx, tx, "tollgate.credits_purchase:"+k); err != nil {
			return res, fmt.Errorf("credits: %w", err)
		}
	}
	var purchase *string
	if err := tx.QueryRow(ctx, `SELECT purchase_id FROM credit_purchases WHERE purchase_key = ANY($1) ORDER BY created_at LIMIT 1`, keys).Scan(&purchase); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("credits: purchase: %w", err)
	}
	if purchase != nil {
		res.Already = true
		return res, s.recordKeys(ctx, tx, keys, *purchase, p.TenantID)
	}
	qty := map[string]int64{}
	var prices []string
	for _, l := range p.Lines {
		if l.PriceID == "" || l.Quantity <= 0 {
			continue
		}
		if _, seen := qty[l.PriceID]; !seen {
			prices = append(prices, l.PriceID)
		}
		qty[l.PriceID] += l.Quantity
	}
	rows, err := tx.Query(ctx, `SELECT `+topupCols+` FROM credit_topups WHERE stripe_price_id = ANY($1)`, prices)
	if err != nil {
		return res, fmt.Errorf("credits: purchase: %w", err)
	}
	tops, err := pgx.CollectRows(rows, scanTopup)
	if err != nil {
		return res, fmt.Errorf("credits: purchase: %w", err)
	}
	byPrice := map[string]Topup{}
	for _, t := range tops {
		byPrice[t.PriceID] = t
	}
	id := keys[0]
	for _, price := range prices {
		t, ok := byPrice[price]
		if !ok {
			res.Unmapped = append(res.Unmapped, price)
			continue
		}
		q := qty[price]
		if q > MaxAmount/t.Amount {
			return res, apperr.New(apperr.Invalid, "top-up %s × %d is more than %d units", price, q, int64(MaxAmount))
		}
		g := NewGrant{TenantID: p.TenantID, Meter: t.Meter, Amount: t.Amount * q, Priority: t.Priority,
			EffectiveAt: p.At, Source: SourceTopup, SourceRef: id + ":" + price,
			Reason: fmt.Sprintf("top-up %s × %d (%s)", price, q, strings.Join(keys, ", "))}
		if t.ExpiresIn != nil {
			d, _ := time.ParseDuration(*t.ExpiresIn)
			at := p.At.Add(d)
			g.ExpiresAt = &at
		}
		made, created, err := s.createTx(ctx, tx, g)
		if err != nil {
			return res, err
		}
		if created {
			res.Grants = append(res.Grants, made)
		}
	}
	if len(res.Grants) == 0 {
		return res, nil
	}
	return res, s.recordKeys(ctx, tx, keys, id, p.TenantID)
}

func (s *Service) recordKeys(ctx context.Context, tx pgx.Tx, keys []string, purchase, tenantID string) error {
	_, err := tx.Exec(ctx, `
INSERT INTO credit_purchases (purchase_key, purchase_id, tenant_id, created_at)
SELECT k, $2, $3, $4 FROM unnest($1::text[]) k ON CONFLICT (purchase_key) DO NOTHING`, keys, purchase, tenantID, s.now())
	if err != nil {
		return fmt.Errorf("credits: record purchase: %w", err)
	}
	return nil
}
