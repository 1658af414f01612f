package catalogue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// The catalogue's mapping from Stripe prices and products to plans and
// add-ons (issue 25). A plan sells through several prices (monthly and
// yearly, two currencies, a legacy price kept for existing customers),
// listed in stripe_price_ids (the first is the one self-serve offers by
// default), and may instead or as well name a stripe_product_id, whose
// every price maps to it. Add-ons the same. Every mapped price is one row
// of catalogue_prices, so "a price maps to one thing" is the table's
// primary key; a price mapped twice is a Conflict naming the price and
// what already has it.

const maxPrices = 50

// validatePrices names every bad price id and product id.
func validatePrices(v *apperr.Validation, prices []string, product string) {
	if len(prices) > maxPrices {
		v.Add("stripe_price_ids", "must have at most %d prices", maxPrices)
	}
	seen := map[string]bool{}
	for i, p := range prices {
		field := fmt.Sprintf("stripe_price_ids[%d]", i)
		switch {
		case p == "" || len(p) > 255 || !apperr.Token(p):
			v.Add(field, "must be a Stripe price id such as price_123")
		case seen[p]:
			v.Add(field, "%s is listed twice", p)
		}
		seen[p] = true
	}
	if len(product) > 255 || !apperr.Token(product) {
		v.Add("stripe_product_id", "must be a Stripe product id such as prod_123")
	}
}

// owner is what a mapped price or product belongs to.
type owner struct{ plan, addon string }

func (o owner) String() string {
	if o.plan != "" {
		return "plan " + o.plan
	}
	return "add-on " + o.addon
}

// mappedOf is what a plan or add-on has mapped now: its prices and its
// product ("" none), read before a change replaces them.
func mappedOf(ctx context.Context, q postgres.Querier, o owner) (prices []string, product string, err error) {
	rows, err := q.Query(ctx, `SELECT stripe_price_id FROM catalogue_prices WHERE plan_key = nullif($1, '') OR addon_price_id = nullif($2, '') ORDER BY position, stripe_price_id`, o.plan, o.addon)
	if err != nil {
		return nil, "", fmt.Errorf("read prices: %w", err)
	}
	if prices, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, "", fmt.Errorf("read prices: %w", err)
	}
	err = q.QueryRow(ctx, `SELECT stripe_product_id FROM catalogue_products WHERE plan_key = nullif($1, '') OR addon_price_id = nullif($2, '')`, o.plan, o.addon).Scan(&product)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("read product: %w", err)
	}
	return prices, product, nil
}

// savePrices replaces the prices and product of a plan (plan != "") or an
// add-on (addon != ""). A price or product another plan or add-on has is a
// Conflict naming both.
func savePrices(ctx context.Context, tx pgx.Tx, o owner, field string, prices []string, product string) error {
	rows, err := tx.Query(ctx, `
SELECT stripe_price_id, coalesce(plan_key, ''), coalesce(addon_price_id, '') FROM catalogue_prices
 WHERE stripe_price_id = ANY($1) AND (plan_key IS DISTINCT FROM nullif($2, '') OR addon_price_id IS DISTINCT FROM nullif($3, ''))
 ORDER BY stripe_price_id LIMIT 1`, prices, o.plan, o.addon)
	if err != nil {
		return fmt.Errorf("check prices: %w", err)
	}
	var (
		price string
		other owner
	)
	found := false
	if _, err := pgx.ForEachRow(rows, []any{&price, &other.plan, &other.addon}, func() error { found = true; return nil }); err != nil {
		return fmt.Errorf("check prices: %w", err)
	}
	if found {
		return mappedTwice(field, "price", price, other)
	}
	if product != "" {
		err := tx.QueryRow(ctx, `SELECT coalesce(plan_key, ''), coalesce(addon_price_id, '') FROM catalogue_products
 WHERE stripe_product_id = $1 AND (plan_key IS DISTINCT FROM nullif($2, '') OR addon_price_id IS DISTINCT FROM nullif($3, ''))`,
			product, o.plan, o.addon).Scan(&other.plan, &other.addon)
		if err == nil {
			return mappedTwice("stripe_product_id", "product", product, other)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("check product: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM catalogue_prices WHERE plan_key = nullif($1, '') OR addon_price_id = nullif($2, '')`, o.plan, o.addon); err != nil {
		return fmt.Errorf("save prices: %w", err)
	}
	for i, p := range prices {
		if _, err := tx.Exec(ctx, `INSERT INTO catalogue_prices (stripe_price_id, plan_key, addon_price_id, position)
VALUES ($1, nullif($2, ''), nullif($3, ''), $4)`, p, o.plan, o.addon, i); err != nil {
			return pricesError(err, field, p)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM catalogue_products WHERE plan_key = nullif($1, '') OR addon_price_id = nullif($2, '')`, o.plan, o.addon); err != nil {
		return fmt.Errorf("save product: %w", err)
	}
	if product != "" {
		if _, err := tx.Exec(ctx, `INSERT INTO catalogue_products (stripe_product_id, plan_key, addon_price_id) VALUES ($1, nullif($2, ''), nullif($3, ''))`,
			product, o.plan, o.addon); err != nil {
			return pricesError(err, "stripe_product_id", product)
		}
	}
	return nil
}

func mappedTwice(field, what, id string, other owner) error {
	return &apperr.Error{Code: apperr.Conflict,
		Message: fmt.Sprintf("%s %s is already mapped to %s; a %s maps to one plan or add-on", what, id, other, what),
		Fields:  []apperr.FieldError{{Field: field, Message: fmt.Sprintf("%s %s is already mapped to %s", what, id, other)}}}
}

// pricesError is a unique violation that a concurrent save won: the same
// Conflict, without the other owner's name.
func pricesError(err error, field, id string) error {
	if e, ok := pgError(err).(*apperr.Error); ok && e.Code == apperr.Conflict {
		return &apperr.Error{Code: apperr.Conflict, Message: fmt.Sprintf("%s is already mapped to another plan or add-on", id),
			Fields: []apperr.FieldError{{Field: field, Message: id + " is already mapped"}}}
	}
	return pgError(err)
}

// PlanForItem is the plan a subscription item's price (else its
// product) maps to, or "" when neither maps to a plan; q is the caller's
// transaction (billing's, storing the subscription).
func PlanForItem(ctx context.Context, q postgres.Querier, price, product string) (string, error) {
	var key string
	err := q.QueryRow(ctx, `
SELECT plan_key FROM (
  SELECT plan_key, 0 AS rank FROM catalogue_prices WHERE stripe_price_id = $1
  UNION ALL
  SELECT plan_key, 1 FROM catalogue_products WHERE stripe_product_id = nullif($2, '')
) m WHERE plan_key IS NOT NULL ORDER BY rank LIMIT 1`, price, product).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("catalogue: plan by price: %w", err)
	}
	return key, nil
}

// AddonForItem is the add-on (its id, the first price) a subscription
// item's price or product maps to, or "", in q.
func AddonForItem(ctx context.Context, q postgres.Querier, price, product string) (string, error) {
	var id string
	err := q.QueryRow(ctx, addonOfItemSQL("$1", "$2"), price, product).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("catalogue: add-on by price: %w", err)
	}
	return id, nil
}

// addonOfItemSQL selects the add-on id of an item with the given price and
// product SQL expressions: by the price first, else by the product.
func addonOfItemSQL(price, product string) string {
	return `SELECT addon_price_id FROM (
  SELECT addon_price_id, 0 AS rank FROM catalogue_prices WHERE stripe_price_id = ` + price + `
  UNION ALL
  SELECT addon_price_id, 1 FROM catalogue_products WHERE stripe_product_id = nullif(` + product + `, '')
) m WHERE addon_price_id IS NOT NULL ORDER BY rank LIMIT 1`
}
