package metering

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/limitstore"
)

// FlushRefusals copies the limiter's refusal counts into refusals_daily.
// It reads only the refusal hashes the limiter marked dirty (see
// limitstore.DirtyRefusals), so a pass costs in proportion to the tenants
// refused since the last one, whatever the size of the keyspace. Redis
// holds absolute counts per (tenant, day, policy), so the copy is
// idempotent: GREATEST keeps the larger of what is stored and what Redis
// says, which also keeps the figure when Redis lost the hash. A mark is
// cleared only if no refusal was added meanwhile. It returns how many
// (tenant, day, policy) rows it wrote. The Redis client argument is no
// longer used (the Store has its own).
func (s *Service) FlushRefusals(ctx context.Context, _ redis.UniversalClient) (int, error) {
	marks, err := s.store.DirtyRefusals(ctx)
	if err != nil {
		return 0, fmt.Errorf("metering: refusals: %w", err)
	}
	written := 0
	for _, m := range marks {
		if m.Tenant != "" && ids.IsUUID(m.Tenant) { // else explicit limits of a backend (per IP…), not a tenant
			counts, err := s.store.RefusalsOf(ctx, m)
			if err != nil {
				return written, fmt.Errorf("metering: refusals: %w", err)
			}
			n, err := s.storeRefusals(ctx, m, counts)
			written += n
			if err != nil {
				return written, err
			}
		}
		if err := s.store.ClearRefusalMark(ctx, m); err != nil {
			return written, fmt.Errorf("metering: refusals: %w", err)
		}
	}
	return written, nil
}

// storeRefusals writes one marked hash's counts in one transaction and,
// with Options.Exhausted set, hands it the hard quotas whose count grew
// (quota.exhausted), so the event exists exactly when the figure does.
func (s *Service) storeRefusals(ctx context.Context, m limitstore.RefusalMark, counts map[string]int64) (int, error) {
	written := 0
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		written = 0
		var grown []string
		for policy, n := range counts {
			// before is the stored count as this statement found it: the
			// count grew in this pass when n is larger.
			var before int64
			err := tx.QueryRow(ctx, `
WITH old AS (SELECT refused FROM refusals_daily WHERE tenant_id = $1 AND day = $2::date AND policy = $3)
INSERT INTO refusals_daily AS r (tenant_id, day, policy, refused)
SELECT $1, $2::date, $3, $4 WHERE EXISTS (SELECT 1 FROM tenant_accounts WHERE tenant_id = $1)
ON CONFLICT (tenant_id, day, policy) DO UPDATE SET refused = GREATEST(r.refused, EXCLUDED.refused)
RETURNING coalesce((SELECT refused FROM old), 0)`,
				m.Tenant, m.Day.Format(time.DateOnly), policy, n).Scan(&before)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // the tenant was deleted
			}
			if err != nil {
				return fmt.Errorf("metering: refusals: %w", err)
			}
			written++
			if n > before {
				grown = append(grown, policy)
			}
		}
		if s.opts.Exhausted == nil || len(grown) == 0 {
			return nil
		}
		sort.Strings(grown)
		es, err := s.exhaustions(ctx, m.Tenant, m.Day, grown)
		if err != nil || len(es) == 0 {
			return err
		}
		if err := s.opts.Exhausted(ctx, tx, es); err != nil {
			return fmt.Errorf("metering: exhausted: %w", err)
		}
		return nil
	})
	return written, err
}
