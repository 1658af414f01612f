package entitlements

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
)

// TouchCatalogue is the catalogue's Touch hook (cmd wires it into
// catalogue.Options): inside the transaction of a plan edit or an add-on
// change it pins the plan's tenants to the version they keep ("apply":
// "new"), then bumps the entitlement version of every tenant the change
// reaches, so that the edit and the tenants' versions commit together; the
// snapshots are published after the commit, by the AfterCommit it returns.
// A preview only lists the tenants.
func (s *Service) TouchCatalogue(ctx context.Context, tx pgx.Tx, r catalogue.Reach) (catalogue.Touched, error) {
	var (
		tenants []string
		err     error
	)
	switch {
	case r.Plan != "":
		if r.Keep > 0 {
			if _, err := tx.Exec(ctx, `UPDATE tenants SET plan_version = $2 WHERE plan_key = $1 AND plan_version IS NULL`, r.Plan, r.Keep); err != nil {
				return catalogue.Touched{}, fmt.Errorf("entitlements: grandfather tenants: %w", err)
			}
		}
		tenants, err = s.tenantsReachedBy(ctx, tx, r.Plan)
	default:
		tenants, err = tenantsWithItems(ctx, tx, r.Prices, r.Products)
	}
	if err != nil {
		return catalogue.Touched{}, err
	}
	if r.Preview {
		return catalogue.Touched{Tenants: tenants}, nil
	}
	snaps := make([]limiter.Snapshot, 0, len(tenants))
	for _, id := range tenants {
		snap, err := s.BumpVersionTx(ctx, tx, id, r.Reason)
		if err != nil {
			return catalogue.Touched{}, err
		}
		snaps = append(snaps, snap)
	}
	return catalogue.Touched{Tenants: tenants, AfterCommit: func(ctx context.Context) { s.publishAll(ctx, snaps) }}, nil
}

// tenantsReachedBy lists the tenants whose snapshot depends on the plan:
// those following it (not pinned to a version), and, for the default plan,
// those whose subscription status may have sent them to it.
func (s *Service) tenantsReachedBy(ctx context.Context, q postgres.Querier, key string) ([]string, error) {
	rows, err := q.Query(ctx, `
SELECT id::text FROM tenants WHERE plan_key = $1 AND plan_version IS NULL
UNION
SELECT DISTINCT tenant_id::text FROM subscriptions
 WHERE $1 = $2 AND status NOT IN ('active', 'trialing')
ORDER BY 1`, key, s.opts.DefaultPlan)
	if err != nil {
		return nil, fmt.Errorf("entitlements: tenants of plan: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("entitlements: tenants of plan: %w", err)
	}
	return out, nil
}

// tenantsWithItems lists the tenants with a subscription item of one of
// the prices or products (an add-on's).
func tenantsWithItems(ctx context.Context, q postgres.Querier, prices, products []string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT s.tenant_id::text FROM subscription_items i
		JOIN subscriptions s ON s.id = i.subscription_id
		WHERE i.price_id = ANY($1) OR i.product_id = ANY($2)
		ORDER BY 1`, prices, products)
	if err != nil {
		return nil, fmt.Errorf("entitlements: tenants of add-on: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("entitlements: tenants of add-on: %w", err)
	}
	return out, nil
}
