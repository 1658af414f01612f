package metering

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/ids"
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
			for policy, n := range counts {
				_, err := s.db.Exec(ctx, `
INSERT INTO refusals_daily AS r (tenant_id, day, policy, refused)
SELECT $1, $2::date, $3, $4 WHERE EXISTS (SELECT 1 FROM tenants WHERE id = $1)
ON CONFLICT (tenant_id, day, policy) DO UPDATE SET refused = GREATEST(r.refused, EXCLUDED.refused)`,
					m.Tenant, m.Day.Format(time.DateOnly), policy, n)
				if err != nil {
					return written, fmt.Errorf("metering: refusals: %w", err)
				}
				written++
			}
		}
		if err := s.store.ClearRefusalMark(ctx, m); err != nil {
			return written, fmt.Errorf("metering: refusals: %w", err)
		}
	}
	return written, nil
}
