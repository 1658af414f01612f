package entitlements

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// PurgePlan deletes plan key and every tenant on it, with what references
// them (keys, versions, usage: ON DELETE CASCADE), in one transaction, and
// returns how many tenants went. It lives here rather than in the
// catalogue because most of what it deletes is tenants; the plan goes last,
// through catalogue.DeletePlan. It is for throwaway plans, such as the
// benchmark's seeded one: nothing is published, so a limiter that cached
// one of these tenants keeps it until its cache and Redis keys expire.
func (s *Service) PurgePlan(ctx context.Context, key string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM tenants WHERE plan_key = $1`, key)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		return catalogue.DeletePlan(ctx, tx, key)
	})
	if err != nil {
		return 0, fmt.Errorf("entitlements: purge plan %s: %w", key, err)
	}
	return n, nil
}
