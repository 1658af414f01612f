package catalogue

// Reads that run in the caller's transaction: entitlements builds a
// snapshot from the tenant's rows and the catalogue's in one repeatable-read
// transaction, and checks a plan exists in the transaction that assigns it,
// so these take the caller's postgres.Querier rather than the pool.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// ValidPlanKey reports whether key is a well-formed plan key
// ([a-z0-9_-]{1,64}); a malformed key names no plan.
func ValidPlanKey(key string) bool { return planKeyRe.MatchString(key) }

// ReadPlans returns the plans of keys that exist, in q, by key.
func ReadPlans(ctx context.Context, q postgres.Querier, keys ...string) ([]Plan, error) {
	rows, err := q.Query(ctx, planSelect+` WHERE p.key = ANY($1) ORDER BY p.key`, keys)
	if err != nil {
		return nil, fmt.Errorf("catalogue: read plans: %w", err)
	}
	plans, err := pgx.CollectRows(rows, scanPlan)
	if err != nil {
		return nil, fmt.Errorf("catalogue: read plans: %w", err)
	}
	return plans, nil
}

// LockPlan returns the plan, its row locked in tx until the commit (FOR NO
// KEY UPDATE: tenants may still reference it); NotFound when there is none.
func LockPlan(ctx context.Context, tx pgx.Tx, key string) (Plan, error) {
	p, err := getPlan(ctx, tx, key, true)
	if err != nil {
		return Plan{}, fmt.Errorf("catalogue: lock plan: %w", err)
	}
	return p, nil
}

// PlanExists reports whether there is a plan key, in q.
func PlanExists(ctx context.Context, q postgres.Querier, key string) (bool, error) {
	if !ValidPlanKey(key) {
		return false, nil
	}
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM plans WHERE key = $1)`, key).Scan(&ok); err != nil {
		return false, fmt.Errorf("catalogue: plan exists: %w", err)
	}
	return ok, nil
}

// PlanNames are the names of the plans of keys that exist (key → name).
func PlanNames(ctx context.Context, q postgres.Querier, keys []string) (map[string]string, error) {
	out := map[string]string{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT key, name FROM plans WHERE key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("catalogue: plan names: %w", err)
	}
	var key, name string
	if _, err := pgx.ForEachRow(rows, []any{&key, &name}, func() error { out[key] = name; return nil }); err != nil {
		return nil, fmt.Errorf("catalogue: plan names: %w", err)
	}
	return out, nil
}

// PinnedVersion is the version of plan that price is pinned to
// (price_versions), or 0 when the price is not the plan's or is not pinned.
func PinnedVersion(ctx context.Context, q postgres.Querier, price, plan string) (int64, error) {
	var pinned *int64
	err := q.QueryRow(ctx, `SELECT plan_version FROM catalogue_prices WHERE stripe_price_id = $1 AND plan_key = $2`, price, plan).Scan(&pinned)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("catalogue: price version: %w", err)
	}
	if pinned == nil {
		return 0, nil
	}
	return *pinned, nil
}

// DeletePlan deletes plan key in the caller's transaction. Its tenants
// must be gone by then (their foreign key refuses otherwise):
// entitlements.PurgePlan deletes them first.
func DeletePlan(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM plans WHERE key = $1`, key); err != nil {
		return fmt.Errorf("catalogue: delete plan: %w", err)
	}
	return nil
}

// Item is a subscription item as the catalogue maps it: its Stripe price
// and product ("" for none).
type Item struct{ Price, Product string }

// Grant is what an add-on grants per unit of an item's quantity.
type Grant struct {
	Price    string // the add-on's id, its first price
	Name     string
	Quotas   map[string]int64
	Features []string
}

// AddonsForItems maps each item to the add-on its price (else its
// product) maps to, in q: out[i] is items[i]'s grant, nil when it maps to
// none.
func AddonsForItems(ctx context.Context, q postgres.Querier, items []Item) ([]*Grant, error) {
	out := make([]*Grant, len(items))
	if len(items) == 0 {
		return out, nil
	}
	prices, products := make([]string, len(items)), make([]string, len(items))
	for i, it := range items {
		prices[i], products[i] = it.Price, it.Product
	}
	rows, err := q.Query(ctx, `
SELECT i.n, a.stripe_price_id, a.name, a.quotas, a.features
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS i(price, product, n)
  JOIN LATERAL (`+addonOfItemSQL("i.price", "i.product")+`) m ON true
  JOIN addon_grants a ON a.stripe_price_id = m.addon_price_id`, prices, products)
	if err != nil {
		return nil, fmt.Errorf("catalogue: add-ons of items: %w", err)
	}
	var (
		n int64
		g Grant
	)
	if _, err := pgx.ForEachRow(rows, []any{&n, &g.Price, &g.Name, &g.Quotas, &g.Features}, func() error {
		grant := g
		out[n-1] = &grant
		g = Grant{}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("catalogue: add-ons of items: %w", err)
	}
	return out, nil
}
