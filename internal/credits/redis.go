package credits

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Grants in Redis: the limiter draws a tenant's grants from the list and
// remaining units in the tenant's state hash (keyspace.GrantsField), which
// credits writes through GrantWriter whenever a grant is created, voided or
// expires, and which the limiter rebuilds from RedisGrants when Redis lost
// them. Postgres's remaining is what no flush has recorded as drawn, so a
// grant Redis has keeps Redis's figure (ahead by the draws not flushed
// yet), and one Redis lost is seeded with the ledger's.

// GrantWriter writes a tenant's grants where the limiter draws them:
// *limitstore.Store (keyspace.Keys.PutGrants), which calls load after it
// has read the state hash's epoch and again when the epoch moved.
type GrantWriter interface {
	PutGrants(ctx context.Context, tenantID string, load func(context.Context) ([]keyspace.Grant, error)) error
}

// RedisGrants returns the tenant's open grants of every meter, pending ones
// included (they take effect by Redis's clock), in draw order: priority,
// then earliest expiry (never-expiring last), then creation; each with its
// remaining in the ledger. It is the limiter's GrantLoader inside Tollgate.
func (s *Service) RedisGrants(ctx context.Context, tenantID string) ([]keyspace.Grant, error) {
	rows, err := s.db.Query(ctx, `
SELECT id::text, meter, effective_at, expires_at, remaining FROM credit_grants
 WHERE tenant_id = $1::uuid AND voided_at IS NULL AND expired_at IS NULL
   AND (expires_at IS NULL OR expires_at > $2) AND remaining > 0
 ORDER BY priority, expires_at NULLS LAST, created_at, id`, tenantID, s.now())
	if err != nil {
		return nil, fmt.Errorf("credits: grants of %s: %w", tenantID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (keyspace.Grant, error) {
		var g keyspace.Grant
		var exp *time.Time
		if err := row.Scan(&g.ID, &g.Meter, &g.EffectiveAt, &exp, &g.Remaining); err != nil {
			return g, err
		}
		if exp != nil {
			g.ExpiresAt = *exp
		}
		return g, nil
	})
	if err != nil {
		return nil, fmt.Errorf("credits: grants of %s: %w", tenantID, err)
	}
	return out, nil
}

// Publish writes the tenant's grants to Redis (after a change committed).
// Without a GrantWriter it does nothing. A failure is logged and returned;
// the worker's sweep (PublishChanged) writes them again.
func (s *Service) Publish(ctx context.Context, tenantID string) error {
	if s.opts.Grants == nil {
		return nil
	}
	err := s.opts.Grants.PutGrants(ctx, tenantID, func(ctx context.Context) ([]keyspace.Grant, error) {
		return s.RedisGrants(ctx, tenantID)
	})
	if err != nil {
		s.log.WarnContext(ctx, "grants not written to Redis; the sweep retries", "tenant", tenantID, "err", err)
		return fmt.Errorf("credits: publish grants of %s: %w", tenantID, err)
	}
	return nil
}

// PublishChanged writes to Redis the grants of every tenant with a grant
// created, voided or expiring after since (and up to now), or, with a zero
// since, of every tenant with an open grant: the worker's sweep, which
// brings grants made inside another package's transaction (a top-up, a
// rollover) to the limiter and repairs a Publish that failed. It returns
// how many tenants it wrote.
func (s *Service) PublishChanged(ctx context.Context, since time.Time) (int, error) {
	if s.opts.Grants == nil {
		return 0, nil
	}
	var rows pgx.Rows
	var err error
	if since.IsZero() {
		rows, err = s.db.Query(ctx, `SELECT DISTINCT tenant_id::text FROM credit_grants WHERE voided_at IS NULL AND expired_at IS NULL`)
	} else {
		rows, err = s.db.Query(ctx, `
SELECT DISTINCT tenant_id::text FROM credit_grants
 WHERE created_at > $1 OR voided_at > $1 OR expired_at > $1 OR (expires_at > $1 AND expires_at <= $2)`, since, s.now())
	}
	if err != nil {
		return 0, fmt.Errorf("credits: grants changed: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("credits: grants changed: %w", err)
	}
	n := 0
	for _, t := range tenants {
		if err := s.Publish(ctx, t); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
