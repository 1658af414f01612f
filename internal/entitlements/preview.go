package entitlements

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
)

// Previews show an admin what a change would do before it is confirmed. Each
// one runs the change's own statements (setPlanTx, deleteOverrideTx) and computes the result with the snapshot rules, in a
// transaction that is always rolled back: the preview can never disagree with
// the change, because it is the change, undone. Nothing is published.

// dryRun runs fn in a transaction that is rolled back (postgres.DryRun).
func (s *Service) dryRun(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return postgres.DryRun(ctx, s.db, fn)
}

// Effect is a tenant's snapshot before and after a change that has not been
// made.
type Effect struct {
	Before limiter.Snapshot
	After  limiter.Snapshot
}

// PreviewPlanChange is what SetPlan (and so ChangePlan) would give the
// tenant on planKey, status rules, add-ons and overrides included.
func (s *Service) PreviewPlanChange(ctx context.Context, tenantID, planKey string) (Effect, error) {
	var e Effect
	err := s.dryRun(ctx, func(tx pgx.Tx) error {
		var err error
		if e.Before, err = s.buildSnapshot(ctx, tx, tenantID); err != nil {
			return err
		}
		if err := setPlanTx(ctx, tx, tenantID, planKey); err != nil {
			return err
		}
		e.After, err = s.buildSnapshot(ctx, tx, tenantID)
		return err
	})
	if err != nil {
		return Effect{}, fmt.Errorf("entitlements: preview plan change: %w", err)
	}
	return e, nil
}

// PreviewOverrideRemoval is what DeleteOverride would leave the tenant
// with; the override's meter is returned too.
func (s *Service) PreviewOverrideRemoval(ctx context.Context, tenantID, overrideID string) (Effect, string, error) {
	var (
		e     Effect
		meter string
	)
	err := s.dryRun(ctx, func(tx pgx.Tx) error {
		var err error
		if e.Before, err = s.buildSnapshot(ctx, tx, tenantID); err != nil {
			return err
		}
		if meter, err = deleteOverrideTx(ctx, tx, tenantID, overrideID); err != nil {
			return err
		}
		e.After, err = s.buildSnapshot(ctx, tx, tenantID)
		return err
	})
	if err != nil {
		return Effect{}, "", fmt.Errorf("entitlements: preview override removal: %w", err)
	}
	return e, meter, nil
}
