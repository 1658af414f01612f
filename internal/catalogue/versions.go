package catalogue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Plan versions (issue 25). Every edit of a plan is version n+1 (the plan
// row is always the current one). An edit with "apply": "all" (the
// default) reaches every tenant that follows the plan; with "apply":
// "new" the tenants on it keep version n (tenants.plan_version) and only
// new assignments get n+1. entitlements.MigratePlan moves the tenants of an
// old version to the current one (the tenants are its). A price may be
// pinned to a version (price_versions), so that a legacy price keeps its
// limits whatever the tenant's own version.

// What PATCH /admin/v1/plans/{key} applies an edit to.
const (
	ApplyAll = "all" // every tenant following the plan (today's behaviour)
	ApplyNew = "new" // new assignments only; tenants on the plan keep their version
)

// saveVersion keeps the plan as it is now as its version's record.
func saveVersion(ctx context.Context, q postgres.Querier, p Plan) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode plan version: %w", err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO plan_versions (plan_key, version, plan) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		p.Key, p.Version, raw); err != nil {
		return fmt.Errorf("save plan version: %w", err)
	}
	return nil
}

// PlanAt is the plan as it was at version v (the current plan when v is
// its version, 0, or has no record), in q: a snapshot reads the version a
// tenant holds in its own transaction.
func PlanAt(ctx context.Context, q postgres.Querier, cur Plan, v int64) (Plan, error) {
	if v <= 0 || v == cur.Version {
		return cur, nil
	}
	var raw []byte
	err := q.QueryRow(ctx, `SELECT plan FROM plan_versions WHERE plan_key = $1 AND version = $2`, cur.Key, v).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return cur, nil
	}
	if err != nil {
		return Plan{}, fmt.Errorf("catalogue: read plan version: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(raw, &p); err != nil {
		return Plan{}, fmt.Errorf("catalogue: decode plan version: %w", err)
	}
	// Name, prices and visibility are the plan's now; the limits are the
	// version's.
	out := cur
	out.Version, out.Rate, out.Concurrency, out.Quotas, out.Features, out.QuotaWindow = v, p.Rate, p.Concurrency, p.Quotas, p.Features, p.QuotaWindow
	if out.Quotas == nil {
		out.Quotas = map[string]Quota{}
	}
	if out.Features == nil {
		out.Features = []string{}
	}
	return out, nil
}

// savePriceVersions pins prices of the plan to versions.
func savePriceVersions(ctx context.Context, tx pgx.Tx, key string, pins map[string]int64, current int64) error {
	var v apperr.Validation
	for _, price := range slices.Sorted(maps.Keys(pins)) {
		if n := pins[price]; n < 1 || n > current {
			v.Add("price_versions."+price, "must be a version of the plan, 1 to %d", current)
		}
	}
	if err := v.Err(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE catalogue_prices SET plan_version = NULL WHERE plan_key = $1`, key); err != nil {
		return fmt.Errorf("save price versions: %w", err)
	}
	for _, price := range slices.Sorted(maps.Keys(pins)) {
		tag, err := tx.Exec(ctx, `UPDATE catalogue_prices SET plan_version = $3 WHERE plan_key = $1 AND stripe_price_id = $2`, key, price, pins[price])
		if err != nil {
			return fmt.Errorf("save price versions: %w", err)
		}
		if tag.RowsAffected() == 0 {
			v.Add("price_versions."+price, "%s is not one of the plan's stripe_price_ids", price)
		}
	}
	return v.Err()
}
