package limitstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Deletes KEYS[1] only while it still names ARGV[1]: an external id that
// moved to another tenant is not taken from it by a late write.
var deleteAliasScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// The alias of an external id is keyspace's Keys.Alias.

// MoveAlias records that tenant's external id changed from old to new
// ("" = none): old's alias goes (if it still names tenant), new's is
// written, then "<tenant>:<version>" is published on Invalidations() so
// that every limiter drops what it resolved to tenant. The version is the
// tenant's current one, so a cached snapshot stays (it did not change).
// The keys of two external ids live in different slots, hence three
// commands; a write lost halfway is repaired by RefreshAlias's pass.
func (s *Store) MoveAlias(ctx context.Context, tenant, old, new string, version int64) error {
	if !validName(tenant) {
		return fmt.Errorf("limitstore: alias of tenant id %q: invalid tenant id", tenant)
	}
	if old != "" && old != new {
		if err := deleteAliasScript.Run(ctx, s.rdb, []string{s.keys.Alias(old)}, tenant).Err(); err != nil {
			return fmt.Errorf("limitstore: deleting alias %q: %w", old, err)
		}
	}
	if new != "" {
		if err := s.RefreshAlias(ctx, new, tenant); err != nil {
			return err
		}
	}
	if err := s.rdb.Publish(ctx, s.keys.Invalidations(), keyspace.Invalidation(tenant, version)).Err(); err != nil {
		return fmt.Errorf("limitstore: announcing alias of %q: %w", tenant, err)
	}
	return nil
}

// RefreshAlias writes the alias external id → tenant with SnapshotTTL,
// unannounced: for a tenant whose alias did not change (the republishing
// pass, a loader's write-back).
func (s *Store) RefreshAlias(ctx context.Context, externalID, tenant string) error {
	if !validName(externalID) || !validName(tenant) {
		return fmt.Errorf("limitstore: alias %q → %q: invalid name", externalID, tenant)
	}
	if err := s.rdb.Set(ctx, s.keys.Alias(externalID), tenant, s.SnapshotTTL).Err(); err != nil {
		return fmt.Errorf("limitstore: writing alias %q: %w", externalID, err)
	}
	return nil
}

// Alias reads the tenant an external id names; ok is false when Redis
// has no alias for it.
func (s *Store) Alias(ctx context.Context, externalID string) (tenant string, ok bool, err error) {
	tenant, err = s.rdb.Get(ctx, s.keys.Alias(externalID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("limitstore: reading alias %q: %w", externalID, err)
	}
	return tenant, true, nil
}
