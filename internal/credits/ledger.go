package credits

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// The ledger. Per grant, at every moment:
//
//	amount = consumed + remaining + expired + voided
//
// (a CHECK on credit_grants, so no writer can break it), and consumed is the
// sum of the grant's credit_consumption rows, one per usage period. The
// limiter will decide draws in Redis; the flush records them here through
// RecordDraws, once per flush id.

// Draw is what one flush says a grant gave in one usage period: Units
// positive for units drawn, negative for units a settlement refunded to the
// grant after an earlier flush recorded them.
type Draw struct {
	// FlushID names the flush (its claim id); a draw of the same flush and
	// grant is recorded once, however often it is replayed.
	FlushID     string
	GrantID     string
	PeriodStart time.Time
	Units       int64
}

// Recorded is what the ledger made of one Draw.
type Recorded struct {
	// Attributed is what the grant took: Units unless the grant had less
	// than that left (then the rest is the caller's to count as included
	// or overage usage), or, for a refund, less than that consumed in the
	// period. A replay answers what the first recording attributed.
	Attributed int64
	// Duplicate: the flush id was recorded for this grant before; nothing
	// changed now.
	Duplicate bool
}

// RecordDraws records draws in one transaction of its own; see
// RecordDrawsTx.
func (s *Service) RecordDraws(ctx context.Context, draws []Draw) ([]Recorded, error) {
	var out []Recorded
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		out, err = s.RecordDrawsTx(ctx, tx, draws)
		return err
	})
	return out, err
}

// RecordDrawsTx records draws in the caller's transaction (the flush's, so
// that usage and grant consumption commit together). Units drawn from an
// open grant come out of its remaining; from a grant closed meanwhile (the
// limiter drew before the void or the expiry reached it) out of what the
// close moved to voided or expired, since those units were in fact used.
// A draw beyond everything the grant has is attributed only up to that.
// Grants are locked in id order, so concurrent flushes never deadlock.
func (s *Service) RecordDrawsTx(ctx context.Context, tx pgx.Tx, draws []Draw) ([]Recorded, error) {
	out := make([]Recorded, len(draws))
	order := make([]int, len(draws))
	for i := range order {
		order[i] = i
	}
	var v apperr.Validation
	for i, d := range draws {
		if d.FlushID == "" || len(d.FlushID) > 255 {
			v.Add(fmt.Sprintf("draws[%d].flush_id", i), "must be 1-255 characters")
		}
		if !ids.IsUUID(d.GrantID) {
			v.Add(fmt.Sprintf("draws[%d].grant_id", i), "must be a grant id")
		}
		if d.PeriodStart.IsZero() {
			v.Add(fmt.Sprintf("draws[%d].period_start", i), "is required")
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(draws[a].GrantID, draws[b].GrantID) })
	now := s.now()
	var pending []pendingEvent
	for _, i := range order {
		r, evs, err := s.recordDraw(ctx, tx, now, draws[i])
		if err != nil {
			return nil, err
		}
		out[i] = r
		pending = append(pending, evs...)
	}
	if err := s.announce(ctx, tx, pending); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Service) recordDraw(ctx context.Context, tx pgx.Tx, now time.Time, d Draw) (Recorded, []pendingEvent, error) {
	// The grant's row lock first: two flushes of one grant take turns, and
	// the second sees the first's flush row once the first commits.
	var (
		amount, remaining, expired, voided, periodConsumed int64
		closedVoid, closedExpiry                           bool
	)
	// The lock is a statement of its own: a statement that waited for it
	// would read the other tables as they were before the wait.
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM credit_grants WHERE id = $1 FOR UPDATE`, d.GrantID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return Recorded{}, nil, fmt.Errorf("credits: record draw of grant %s: %w", d.GrantID, ErrNotFound)
	}
	if err != nil {
		return Recorded{}, nil, fmt.Errorf("credits: record draw: %w", err)
	}
	var evs []pendingEvent
	if units, err := expireTx(ctx, tx, now, d.GrantID); err != nil {
		return Recorded{}, nil, err
	} else if units > 0 {
		evs = append(evs, pendingEvent{grantID: d.GrantID, kind: EventExpired, units: units})
	}
	err = tx.QueryRow(ctx, `
SELECT g.amount, g.remaining, g.expired, g.voided, g.voided_at IS NOT NULL, g.expired_at IS NOT NULL,
       COALESCE((SELECT c.consumed FROM credit_consumption c WHERE c.grant_id = g.id AND c.period_start = $2), 0)
  FROM credit_grants g WHERE g.id = $1`, d.GrantID, d.PeriodStart).
		Scan(&amount, &remaining, &expired, &voided, &closedVoid, &closedExpiry, &periodConsumed)
	if err != nil {
		return Recorded{}, nil, fmt.Errorf("credits: record draw: %w", err)
	}
	var prev *int64 // NULL: this flush is new for the grant
	err = tx.QueryRow(ctx, `
WITH ins AS (
  INSERT INTO credit_flushes (flush_id, grant_id, period_start, quantity, attributed, recorded_at)
  VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT DO NOTHING RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN NULL
            ELSE (SELECT attributed FROM credit_flushes WHERE flush_id = $1 AND grant_id = $2) END`,
		d.FlushID, d.GrantID, d.PeriodStart, d.Units, now).Scan(&prev)
	if err != nil {
		return Recorded{}, nil, fmt.Errorf("credits: record draw: %w", err)
	}
	if prev != nil {
		return Recorded{Attributed: *prev, Duplicate: true}, evs, nil
	}
	// The bucket units come from (or go back to): remaining while open,
	// else the bucket the close filled.
	bucket, have := "remaining", remaining
	switch {
	case closedVoid:
		bucket, have = "voided", voided
	case closedExpiry:
		bucket, have = "expired", expired
	}
	var a int64
	if d.Units >= 0 {
		a = min(d.Units, have)
	} else {
		a = -min(-d.Units, periodConsumed)
	}
	if a != 0 {
		// bucket is one of three constants above, never input.
		_, err = tx.Exec(ctx, `UPDATE credit_grants SET consumed = consumed + $2, `+bucket+` = `+bucket+` - $2, updated_at = $3 WHERE id = $1`,
			d.GrantID, a, now)
		if err != nil {
			return Recorded{}, nil, fmt.Errorf("credits: record draw: %w", err)
		}
		// A refund (a < 0) only ever lowers a row that exists: it gives back
		// at most what the period consumed.
		sql := `
INSERT INTO credit_consumption (grant_id, period_start, consumed, updated_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (grant_id, period_start) DO UPDATE SET consumed = credit_consumption.consumed + EXCLUDED.consumed, updated_at = EXCLUDED.updated_at`
		if a < 0 {
			sql = `UPDATE credit_consumption SET consumed = consumed + $3, updated_at = $4 WHERE grant_id = $1 AND period_start = $2`
		}
		_, err = tx.Exec(ctx, sql, d.GrantID, d.PeriodStart, a, now)
		if err != nil {
			return Recorded{}, nil, fmt.Errorf("credits: record draw: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE credit_flushes SET attributed = $3 WHERE flush_id = $1 AND grant_id = $2`, d.FlushID, d.GrantID, a); err != nil {
			return Recorded{}, nil, fmt.Errorf("credits: record draw: %w", err)
		}
	}
	if bucket == "remaining" {
		for _, k := range drawEvents(s.opts.LowPercent, amount, remaining, remaining-a) {
			evs = append(evs, pendingEvent{grantID: d.GrantID, kind: k, units: a})
		}
	}
	return Recorded{Attributed: a}, evs, nil
}

// expireTx writes the expiry of grant id if it is due: what remains moves
// to expired, at expires_at. It returns the units that expired (0 when it
// was not due, or had nothing left).
func expireTx(ctx context.Context, tx pgx.Tx, now time.Time, id string) (int64, error) {
	var units int64
	err := tx.QueryRow(ctx, `
WITH due AS (SELECT id, remaining FROM credit_grants
              WHERE id = $1 AND voided_at IS NULL AND expired_at IS NULL AND expires_at <= $2)
UPDATE credit_grants g SET expired = g.expired + g.remaining, remaining = 0, expired_at = g.expires_at, updated_at = $2
  FROM due WHERE g.id = due.id RETURNING due.remaining`, id, now).Scan(&units)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("credits: expire grant: %w", err)
	}
	return units, nil
}

// ExpireDue writes the expiry of every grant whose expires_at has passed
// (the worker's credits_expire_grants job): what remained moves to
// expired, and expired_at is set to expires_at. A grant that expires with
// units left is announced (Options.Events) in the same transaction. It
// returns how many expired.
func (s *Service) ExpireDue(ctx context.Context) (int64, error) {
	now := s.now()
	var n int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
WITH due AS (SELECT id, remaining FROM credit_grants
              WHERE voided_at IS NULL AND expired_at IS NULL AND expires_at IS NOT NULL AND expires_at <= $1
              ORDER BY id FOR UPDATE)
UPDATE credit_grants g SET expired = g.expired + g.remaining, remaining = 0, expired_at = g.expires_at, updated_at = $1
  FROM due WHERE g.id = due.id RETURNING g.id::text, due.remaining`, now)
		if err != nil {
			return err
		}
		var pending []pendingEvent
		for rows.Next() {
			var p pendingEvent
			if err := rows.Scan(&p.grantID, &p.units); err != nil {
				rows.Close()
				return err
			}
			n++
			if p.units > 0 {
				p.kind = EventExpired
				pending = append(pending, p)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return s.announce(ctx, tx, pending)
	})
	if err != nil {
		return 0, fmt.Errorf("credits: expire grants: %w", err)
	}
	if n > 0 {
		s.log.InfoContext(ctx, "grants expired", "count", n)
	}
	return n, nil
}

// flushRecordTTL is how long a flush record is kept: longer than a claim
// lives in Redis (40 days, as metering keeps usage_flushes), after which
// its flush id can never be replayed.
const flushRecordTTL = 41 * 24 * time.Hour

// PruneFlushRecords deletes flush records no replay can need any more, at
// most 5,000 a call; it returns how many.
func (s *Service) PruneFlushRecords(ctx context.Context) (int64, error) {
	tag, err := s.db.Exec(ctx, `
DELETE FROM credit_flushes WHERE ctid = ANY (ARRAY(
  SELECT ctid FROM credit_flushes WHERE recorded_at < $1 LIMIT 5000))`, s.now().Add(-flushRecordTTL))
	if err != nil {
		return 0, fmt.Errorf("credits: prune flush records: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Balance is what a tenant's grants of one meter hold at a moment.
type Balance struct {
	Meter string `json:"meter"`
	// Available is the sum of the active grants' remaining units.
	Available int64 `json:"available"`
	// Grants are the active grants in the order the limiter draws
	// them: priority, then earliest expiry (none last), then creation.
	Grants []Grant `json:"grants"`
	// NextEffectiveAt is when the earliest pending grant takes effect
	// (the moment units return, for a Retry-After); nil when none is.
	NextEffectiveAt *time.Time `json:"next_effective_at"`
}

// Balance returns the tenant's balance of meter at the moment at: the
// grants effective by then, neither voided nor expired, with units left.
// It is also what Redis is rebuilt from after a loss: each grant's
// remaining here is what no flush has recorded as drawn.
func (s *Service) Balance(ctx context.Context, tenantID, meter string, at time.Time) (Balance, error) {
	b := Balance{Meter: meter, Grants: []Grant{}}
	if !ids.IsUUID(tenantID) {
		return b, apperr.New(apperr.NotFound, "no tenant %q", tenantID)
	}
	rows, err := s.db.Query(ctx, `
SELECT `+grantCols+` FROM credit_grants
 WHERE tenant_id = $1 AND meter = $2 AND voided_at IS NULL AND expired_at IS NULL
   AND (expires_at IS NULL OR expires_at > $3) AND remaining > 0
 ORDER BY priority, expires_at NULLS LAST, created_at, id`, tenantID, meter, at)
	if err != nil {
		return b, fmt.Errorf("credits: balance: %w", err)
	}
	all, err := pgx.CollectRows(rows, scanGrant(at))
	if err != nil {
		return b, fmt.Errorf("credits: balance: %w", err)
	}
	for _, g := range all {
		if g.EffectiveAt.After(at) {
			if b.NextEffectiveAt == nil || g.EffectiveAt.Before(*b.NextEffectiveAt) {
				t := g.EffectiveAt
				b.NextEffectiveAt = &t
			}
			continue
		}
		b.Available += g.Remaining
		b.Grants = append(b.Grants, g)
	}
	return b, nil
}

// PrepaidConsumed is what the tenant's grants of meter gave in the usage
// period starting at periodStart, counting only the grants Tollgate's
// customer paid or was given here (admin, top-up, rollover): units they
// covered are not overage and must not be billed again. Units of Stripe
// credit grants are left out: those are billed as usage and Stripe applies
// the credit on the invoice, so discounting them here would discount them
// twice.
func (s *Service) PrepaidConsumed(ctx context.Context, tenantID, meter string, periodStart time.Time) (int64, error) {
	if !ids.IsUUID(tenantID) {
		return 0, nil
	}
	var n int64
	err := s.db.QueryRow(ctx, `
SELECT coalesce(sum(c.consumed), 0)::bigint FROM credit_consumption c JOIN credit_grants g ON g.id = c.grant_id
 WHERE g.tenant_id = $1 AND g.meter = $2 AND c.period_start = $3 AND g.source <> $4`,
		tenantID, meter, periodStart, SourceStripeCredit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("credits: prepaid consumed: %w", err)
	}
	return n, nil
}
