package remote

import (
	"context"
	"fmt"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// ExternalTenant is a limiter.Options.ExternalLoader: the tenant id of an
// external id (the backend's own id for the tenant), from Tollgate's
// service route GET /service/v1/tenants/ext:<external id>/snapshot, which
// also writes the alias back to Redis. limiter.ErrUnknownTenant (wrapped)
// when no tenant has it.
func (r *Client) ExternalTenant(ctx context.Context, externalID string) (string, error) {
	if !keyspace.ValidExternalID(externalID) {
		return "", fmt.Errorf("%w: no tenant has the external id %q", limiter.ErrUnknownTenant, externalID)
	}
	var snap limiter.Snapshot
	if err := r.get(ctx, "tenants/ext:"+externalID+"/snapshot", nil, &snap); err != nil {
		return "", err
	}
	if snap.TenantID == "" {
		return "", fmt.Errorf("remote: the snapshot of external id %q names no tenant", externalID)
	}
	return snap.TenantID, nil
}
