package catalogue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Addon is what a Stripe price grants when it is an item of a tenant's
// subscription (issue 9): extra quota units per meter and features, each
// multiplied by the item's quantity, while the subscription gives the
// tenant its own plan.
type Addon struct {
	StripePriceID string           `json:"stripe_price_id"`
	Name          string           `json:"name"`
	Quotas        map[string]int64 `json:"quotas"` // meter → extra units per unit of quantity
	Features      []string         `json:"features"`
	// StripePriceIDs are every price that grants it, StripePriceID first;
	// StripeProductID, when set, maps every price of the product.
	StripePriceIDs  []string  `json:"stripe_price_ids"`
	StripeProductID string    `json:"stripe_product_id,omitempty"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

// AddonInput is the body of PUT /admin/v1/addons/{price_id}.
type AddonInput struct {
	Name     string           `json:"name"`
	Quotas   map[string]int64 `json:"quotas"`
	Features []string         `json:"features"`
	// StripePriceIDs are more prices that grant the same (the path's price
	// is always the first); StripeProductID maps every price of a product.
	StripePriceIDs  []string `json:"stripe_price_ids"`
	StripeProductID string   `json:"stripe_product_id"`
}

// prices is the path's price followed by the others.
func (in *AddonInput) prices(priceID string) []string {
	out := []string{priceID}
	for _, p := range in.StripePriceIDs {
		if p != priceID {
			out = append(out, p)
		}
	}
	return out
}

// Validate names every bad field.
func (in *AddonInput) Validate(priceID string) error {
	var v apperr.Validation
	if priceID == "" || len(priceID) > 200 || !apperr.Token(priceID) {
		v.Add("stripe_price_id", "must be a Stripe price id without spaces")
	}
	if l := len(in.Name); l < 1 || l > maxNameLen || !apperr.CleanText(in.Name) {
		v.Add("name", "must be 1-%d printable characters", maxNameLen)
	}
	if len(in.Quotas) > maxQuotas {
		v.Add("quotas", "must have at most %d meters", maxQuotas)
	}
	for _, m := range slices.Sorted(maps.Keys(in.Quotas)) {
		if !meterRe.MatchString(m) {
			v.Add("quotas."+m, "meter name must match [a-z0-9_.-]{1,64}")
			continue
		}
		if in.Quotas[m] < 0 {
			v.Add("quotas."+m, "must not be negative")
		}
	}
	if len(in.Features) > maxFeatures {
		v.Add("features", "must have at most %d entries", maxFeatures)
	}
	for i, f := range in.Features {
		if f == "" || len(f) > maxFeatureLen || !apperr.Token(f) {
			v.Add(fmt.Sprintf("features[%d]", i), "must be 1-%d characters without spaces", maxFeatureLen)
		}
	}
	validatePrices(&v, in.StripePriceIDs, in.StripeProductID)
	if len(in.Quotas) == 0 && len(in.Features) == 0 {
		v.Add("quotas", "an add-on must grant quota or features")
	}
	return v.Err()
}

const addonCols = `stripe_price_id, name, quotas, features,
  coalesce((SELECT array_agg(c.stripe_price_id ORDER BY c.position, c.stripe_price_id) FROM catalogue_prices c WHERE c.addon_price_id = addon_grants.stripe_price_id), '{}'),
  coalesce((SELECT c.stripe_product_id FROM catalogue_products c WHERE c.addon_price_id = addon_grants.stripe_price_id), ''),
  created_at, updated_at`

func scanAddon(r pgx.CollectableRow) (Addon, error) {
	var a Addon
	err := r.Scan(&a.StripePriceID, &a.Name, &a.Quotas, &a.Features, &a.StripePriceIDs, &a.StripeProductID, &a.CreatedAt, &a.UpdatedAt)
	if a.Quotas == nil {
		a.Quotas = map[string]int64{}
	}
	if a.Features == nil {
		a.Features = []string{}
	}
	return a, err
}

// ListAddons lists every add-on grant by price id.
func (s *Service) ListAddons(ctx context.Context) ([]Addon, error) {
	rows, err := s.db.Query(ctx, `SELECT `+addonCols+` FROM addon_grants ORDER BY stripe_price_id`)
	if err != nil {
		return nil, fmt.Errorf("catalogue: list add-ons: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanAddon)
	if err != nil {
		return nil, fmt.Errorf("catalogue: list add-ons: %w", err)
	}
	if out == nil {
		out = []Addon{}
	}
	return out, nil
}

// GetAddon returns the grant of a price.
func (s *Service) GetAddon(ctx context.Context, priceID string) (Addon, error) {
	rows, err := s.db.Query(ctx, `SELECT `+addonCols+` FROM addon_grants WHERE stripe_price_id = $1`, priceID)
	if err != nil {
		return Addon{}, fmt.Errorf("catalogue: get add-on: %w", err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAddon)
	if errors.Is(err, pgx.ErrNoRows) {
		return Addon{}, apperr.New(apperr.NotFound, "no add-on for price %q", priceID)
	}
	if err != nil {
		return Addon{}, fmt.Errorf("catalogue: get add-on: %w", err)
	}
	return a, nil
}

// PutAddon creates or replaces the grant of a price; created tells which.
// A price that is a plan's stripe_price_id cannot be an add-on. Tenants
// whose subscription has an item of one of its prices or its product, as
// it was or as it is, get a new version (Options.Touch).
func (s *Service) PutAddon(ctx context.Context, priceID string, in AddonInput) (Addon, bool, error) {
	if err := in.Validate(priceID); err != nil {
		return Addon{}, false, err
	}
	if in.Quotas == nil {
		in.Quotas = map[string]int64{}
	}
	in.Features = uniqueSorted(in.Features)
	if in.Features == nil {
		in.Features = []string{}
	}
	var (
		created bool
		touched Touched
	)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
INSERT INTO addon_grants (stripe_price_id, name, quotas, features) VALUES ($1, $2, $3, $4)
ON CONFLICT (stripe_price_id) DO UPDATE SET name = EXCLUDED.name, quotas = EXCLUDED.quotas, features = EXCLUDED.features, updated_at = now()
RETURNING (xmax = 0)`, priceID, in.Name, in.Quotas, in.Features).Scan(&created)
		if err != nil {
			return pgError(err)
		}
		// Tenants of the prices it had and of the ones it has now.
		r, err := addonReach(ctx, tx, priceID, "add-on "+priceID+" changed")
		if err != nil {
			return err
		}
		if err := savePrices(ctx, tx, owner{addon: priceID}, "stripe_price_ids", in.prices(priceID), in.StripeProductID); err != nil {
			return err
		}
		r.Prices = appendNew(r.Prices, in.prices(priceID)...)
		if in.StripeProductID != "" {
			r.Products = appendNew(r.Products, in.StripeProductID)
		}
		touched, err = s.touch(ctx, tx, r)
		return err
	})
	if err != nil {
		return Addon{}, false, fmt.Errorf("catalogue: put add-on: %w", err)
	}
	s.log.InfoContext(ctx, "add-on saved", "price", priceID, "tenants", len(touched.Tenants))
	committed(ctx, touched)
	a, err := s.GetAddon(ctx, priceID)
	return a, created, err
}

// DeleteAddon removes a grant; tenants that had it get a new version.
func (s *Service) DeleteAddon(ctx context.Context, priceID string) error {
	var touched Touched
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		r, err := addonReach(ctx, tx, priceID, "add-on "+priceID+" removed")
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM addon_grants WHERE stripe_price_id = $1`, priceID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return apperr.New(apperr.NotFound, "no add-on for price %q", priceID)
		}
		touched, err = s.touch(ctx, tx, r)
		return err
	})
	if err != nil {
		return fmt.Errorf("catalogue: delete add-on: %w", err)
	}
	committed(ctx, touched)
	return nil
}

// addonReach is whom a change of the add-on reaches as it is mapped now:
// items of its id, its prices and its product.
func addonReach(ctx context.Context, q postgres.Querier, priceID, reason string) (Reach, error) {
	prices, product, err := mappedOf(ctx, q, owner{addon: priceID})
	if err != nil {
		return Reach{}, err
	}
	r := Reach{Prices: appendNew([]string{priceID}, prices...), Reason: reason}
	if product != "" {
		r.Products = []string{product}
	}
	return r, nil
}

// appendNew appends the ids list does not have yet.
func appendNew(list []string, ids ...string) []string {
	for _, id := range ids {
		if !slices.Contains(list, id) {
			list = append(list, id)
		}
	}
	return list
}
