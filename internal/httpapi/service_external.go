package httpapi

import (
	"context"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// ExternalIDPrefix marks a service route's {id} as the backend's own id for
// the tenant: /service/v1/tenants/ext:<external id>/snapshot. A prefix, not
// a second set of routes: a path has one slot for the tenant, a tenant id
// is a UUID (which never contains ':'), so "ext:…" can never be mistaken
// for one, while an external id may itself look like a UUID and so cannot
// be told apart without it. A remote loader that knows only the external
// id asks the same routes.
const ExternalIDPrefix = "ext:"

// externalTenant resolves an external id to its tenant id from Postgres
// (the service routes are the rare path: a snapshot or counter missing
// from Redis), writing its alias back to Redis for the limiters. An
// unknown one is the answer of an unknown tenant id: 404 naming what was
// asked for.
func (s *Server) externalTenant(ctx context.Context, raw, ext string) (string, error) {
	id, err := s.Entitlements.LoadExternal(ctx, ext)
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			return "", apperr.New(apperr.NotFound, "no tenant %q", raw)
		}
		return "", err
	}
	return id, nil
}
