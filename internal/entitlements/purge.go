package entitlements

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PurgePlan deletes plan key and every tenant on it, with what references
// them (keys, versions, usage: ON DELETE CASCADE), in one transaction, and
// returns how many tenants went. It is for throwaway plans, such as the
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
		_, err = tx.Exec(ctx, `DELETE FROM plans WHERE key = $1`, key)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("entitlements: purge plan %s: %w", key, err)
	}
	return n, nil
}
