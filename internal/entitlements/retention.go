package entitlements

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// PruneVersions deletes entitlement versions created before before, except
// each tenant's latest: that one is what the tenant has now (and what
// "has this tenant been refreshed since X" reads), whatever its age.
func (s *Service) PruneVersions(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, s.db, `
DELETE FROM entitlement_versions WHERE (tenant_id, version) IN (
  SELECT v.tenant_id, v.version FROM entitlement_versions v
   WHERE v.created_at < $2
     AND v.version < (SELECT max(l.version) FROM entitlement_versions l WHERE l.tenant_id = v.tenant_id)
   LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("entitlements: prune versions: %w", err)
	}
	return n, nil
}

// PruneExpiredOverrides deletes quota overrides that expired before before
// and whose expiry has taken effect (the tenant has a version made after
// it: RefreshExpiredOverrides's work is done), so an override is never
// removed while a snapshot in Redis still carries it.
func (s *Service) PruneExpiredOverrides(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, s.db, `
DELETE FROM quota_overrides WHERE id IN (
  SELECT o.id FROM quota_overrides o
   WHERE o.expires_at < $2
     AND EXISTS (SELECT 1 FROM entitlement_versions v WHERE v.tenant_id = o.tenant_id AND v.created_at >= o.expires_at)
   LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("entitlements: prune expired overrides: %w", err)
	}
	return n, nil
}
