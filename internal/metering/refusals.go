package metering

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/ids"
)

// FlushRefusals copies the limiter's refusal counts of today and yesterday
// (UTC) into refusals_daily. Redis holds absolute counts per (tenant, day,
// policy), so the copy is idempotent: GREATEST keeps the larger of what is
// stored and what Redis says, which also keeps the figure when Redis lost
// the hash. It returns how many (tenant, day, policy) rows it wrote.
func (s *Service) FlushRefusals(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	now := s.opts.Now().UTC()
	written := 0
	for _, day := range []time.Time{now, now.Add(-24 * time.Hour)} {
		pattern := s.store.Keys().Refusals("*", day)
		tenants, err := scanTenants(ctx, rdb, pattern)
		if err != nil {
			return written, fmt.Errorf("metering: refusals: %w", err)
		}
		for _, t := range tenants {
			if !ids.IsUUID(t) {
				continue // explicit limits of a backend (per IP…), not a tenant
			}
			counts, err := s.store.Refusals(ctx, t, day)
			if err != nil {
				return written, fmt.Errorf("metering: refusals: %w", err)
			}
			for policy, n := range counts {
				_, err := s.db.Exec(ctx, `
INSERT INTO refusals_daily AS r (tenant_id, day, policy, refused)
SELECT $1, $2::date, $3, $4 WHERE EXISTS (SELECT 1 FROM tenants WHERE id = $1)
ON CONFLICT (tenant_id, day, policy) DO UPDATE SET refused = GREATEST(r.refused, EXCLUDED.refused)`,
					t, day.Format(time.DateOnly), policy, n)
				if err != nil {
					return written, fmt.Errorf("metering: refusals: %w", err)
				}
				written++
			}
		}
	}
	return written, nil
}

// scanTenants returns the tenant ids of the keys matching pattern, on every
// master of a Cluster.
func scanTenants(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	scan := func(ctx context.Context, c *redis.Client) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	var all []string
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		ch := make(chan []string, 64)
		errc := make(chan error, 1)
		go func() {
			errc <- c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				keys, err := scan(ctx, m)
				ch <- keys
				return err
			})
			close(ch)
		}()
		for keys := range ch {
			all = append(all, keys...)
		}
		if err := <-errc; err != nil {
			return nil, err
		}
	case *redis.Client:
		keys, err := scan(ctx, c)
		if err != nil {
			return nil, err
		}
		all = keys
	default:
		return nil, fmt.Errorf("unsupported redis client %T", rdb)
	}
	for _, k := range all {
		i := strings.Index(k, "{t:")
		j := strings.Index(k, "}:")
		if i < 0 || j < i {
			continue
		}
		t := k[i+3 : j]
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}
