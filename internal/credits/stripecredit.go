package credits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Stripe billing credits (issue 26 point 5): billing decides which meters a
// Stripe credit grant covers and how many units its value buys on each (at
// the meter's price); credits keeps one grant per (Stripe credit grant,
// meter), source stripe_credit, source_ref "<credit grant id>:<meter>", and
// follows what Stripe changes later: a void, a new expiry. Stripe never
// changes a credit grant's amount, so the first event that mirrors it fixes
// its meters and units; events delivered late or replayed never grant
// twice and never undo a void.

// StripeCredit is one Stripe credit grant as billing understood it.
type StripeCredit struct {
	TenantID string
	// ID is the Stripe credit grant's id (credgr_…).
	ID string
	// Units are the units of each meter it buys. Only the first mirror
	// uses them: later events change the grants already made.
	Units       map[string]int64
	Priority    int
	EffectiveAt time.Time
	ExpiresAt   *time.Time
	// Voided: Stripe voided it (voided_at set). A void is never undone.
	Voided bool
	// Updated is the Stripe object's updated time: an object older than
	// the one last applied does not change the expiry back.
	Updated time.Time
	Reason  string
}

// StripeCreditResult is what mirroring did.
type StripeCreditResult struct {
	// Grants mirroring the credit grant, as they are now, by meter; none
	// when it was never mirrored and Units gave nothing to mirror.
	Grants []Grant
	// Created is how many grants were made now.
	Created int
	// Changed: a grant was made, voided or had its expiry moved (the
	// caller writes the tenant's grants to Redis after its commit).
	Changed bool
}

// MirrorStripeCreditTx creates or updates, in the caller's transaction
// (the Stripe event's), the grants mirroring one Stripe credit grant. The
// credit grant's id is locked first, so two events of it take turns.
func (s *Service) MirrorStripeCreditTx(ctx context.Context, tx pgx.Tx, c StripeCredit) (StripeCreditResult, error) {
	var res StripeCreditResult
	if c.ID == "" {
		return res, errors.New("credits: a Stripe credit grant needs its id")
	}
	if err := postgres.XactLock(ctx, tx, "tollgate.credits_stripe_credit:"+c.ID); err != nil {
		return res, fmt.Errorf("credits: %w", err)
	}
	existing, err := s.stripeCreditGrants(ctx, tx, c.TenantID, c.ID)
	if err != nil {
		return res, err
	}
	now := s.now()
	if len(existing) == 0 {
		meters := make([]string, 0, len(c.Units))
		for m, u := range c.Units {
			if u > 0 {
				meters = append(meters, m)
			}
		}
		slices.Sort(meters)
		for _, m := range meters {
			g, created, err := s.CreateTx(ctx, tx, NewGrant{TenantID: c.TenantID, Meter: m, Amount: c.Units[m], Priority: c.Priority,
				EffectiveAt: c.EffectiveAt, ExpiresAt: c.ExpiresAt, Source: SourceStripeCredit, SourceRef: c.ID + ":" + m, Reason: c.Reason})
			if err != nil {
				return res, err
			}
			if created {
				res.Created++
				res.Changed = true
			}
			existing = append(existing, stripeCreditRow{Grant: g})
		}
		if _, err := tx.Exec(ctx, `UPDATE credit_grants SET source_updated_at = $3
 WHERE tenant_id = $1 AND source = $2 AND left(source_ref, length($4) + 1) = $4 || ':'`,
			c.TenantID, SourceStripeCredit, c.Updated, c.ID); err != nil {
			return res, fmt.Errorf("credits: mirror Stripe credit %s: %w", c.ID, err)
		}
		if !c.Voided {
			for _, r := range existing {
				res.Grants = append(res.Grants, r.Grant)
			}
			return res, nil
		}
	}
	var pending []pendingEvent
	for _, r := range existing {
		g := r.Grant
		// An expiry that has passed is written first, so that a void after
		// it voids nothing the grant had already lost.
		units, err := expireTx(ctx, tx, now, g.ID)
		if err != nil {
			return res, err
		}
		if units > 0 {
			pending = append(pending, pendingEvent{grantID: g.ID, kind: EventExpired, units: units})
		}
		stale := r.SourceUpdated != nil && c.Updated.Before(*r.SourceUpdated)
		switch {
		case c.Voided:
			tag, err := tx.Exec(ctx, `
UPDATE credit_grants SET voided = voided + remaining, remaining = 0, voided_at = $2, updated_at = $2
 WHERE id = $1 AND voided_at IS NULL AND expired_at IS NULL`, g.ID, now)
			if err != nil {
				return res, fmt.Errorf("credits: void Stripe credit %s: %w", c.ID, err)
			}
			res.Changed = res.Changed || tag.RowsAffected() > 0
		case !stale && !sameTime(g.ExpiresAt, c.ExpiresAt):
			if c.ExpiresAt != nil && !c.ExpiresAt.After(g.EffectiveAt) {
				s.log.WarnContext(ctx, "Stripe credit grant expiry before its grant takes effect; expiry kept", "credit_grant", c.ID, "grant", g.ID)
				break
			}
			// A closed grant stays closed: its units were voided or expired.
			tag, err := tx.Exec(ctx, `UPDATE credit_grants SET expires_at = $2, updated_at = $3
 WHERE id = $1 AND voided_at IS NULL AND expired_at IS NULL`, g.ID, c.ExpiresAt, now)
			if err != nil {
				return res, fmt.Errorf("credits: expiry of Stripe credit %s: %w", c.ID, err)
			}
			res.Changed = res.Changed || tag.RowsAffected() > 0
		}
		if !stale {
			if _, err := tx.Exec(ctx, `UPDATE credit_grants SET source_updated_at = $2 WHERE id = $1`, g.ID, c.Updated); err != nil {
				return res, fmt.Errorf("credits: mirror Stripe credit %s: %w", c.ID, err)
			}
		}
	}
	if err := s.announce(ctx, tx, pending); err != nil {
		return res, err
	}
	after, err := s.stripeCreditGrants(ctx, tx, c.TenantID, c.ID)
	if err != nil {
		return res, err
	}
	for _, r := range after {
		res.Grants = append(res.Grants, r.Grant)
	}
	return res, nil
}

type stripeCreditRow struct {
	Grant
	SourceUpdated *time.Time
}

// stripeCreditGrants are the tenant's grants mirroring credit grant id, by
// meter, locked.
func (s *Service) stripeCreditGrants(ctx context.Context, tx pgx.Tx, tenantID, id string) ([]stripeCreditRow, error) {
	now := s.now()
	rows, err := tx.Query(ctx, `SELECT `+grantCols+`, source_updated_at FROM credit_grants
 WHERE tenant_id = $1 AND source = $2 AND left(source_ref, length($3) + 1) = $3 || ':'
 ORDER BY meter FOR UPDATE`, tenantID, SourceStripeCredit, id)
	if err != nil {
		return nil, fmt.Errorf("credits: grants of Stripe credit %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stripeCreditRow, error) {
		var r stripeCreditRow
		g := &r.Grant
		err := row.Scan(&g.ID, &g.TenantID, &g.Meter, &g.Amount, &g.Remaining, &g.Consumed, &g.Expired, &g.Voided, &g.Priority,
			&g.EffectiveAt, &g.ExpiresAt, &g.Source, &g.Reason, &g.VoidedAt, &g.ExpiredAt, &g.CreatedAt, &r.SourceUpdated)
		if err != nil {
			return r, err
		}
		g.present(now)
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("credits: grants of Stripe credit %s: %w", id, err)
	}
	return out, nil
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
