package catalogue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PlanEffect is a plan before and after an edit, and the tenants whose
// limits the edit would change (PatchPlan bumps each of them).
type PlanEffect struct {
	Before  Plan
	After   Plan
	Tenants []string // tenant ids, sorted
}

// PreviewPlanPatch is what PatchPlan would save, validated the same way: a
// bad patch is the same field-named error PatchPlan would return. It runs
// PatchPlan's statements (patchPlanTx, and Touch told it is a preview) in
// a transaction that is always rolled back, so that what it shows is what
// the edit does; nothing is published.
func (s *Service) PreviewPlanPatch(ctx context.Context, key string, patch PlanPatch) (PlanEffect, error) {
	var e PlanEffect
	err := s.dryRun(ctx, func(tx pgx.Tx) error {
		var (
			r   Reach
			err error
		)
		if e.Before, e.After, r, err = patchPlanTx(ctx, tx, key, patch); err != nil {
			return err
		}
		r.Preview = true
		touched, err := s.touch(ctx, tx, r)
		e.Tenants = touched.Tenants
		return err
	})
	if err != nil {
		return PlanEffect{}, fmt.Errorf("catalogue: preview plan patch: %w", err)
	}
	if e.Tenants == nil {
		e.Tenants = []string{}
	}
	return e, nil
}
