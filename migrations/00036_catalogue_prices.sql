-- Several Stripe prices per plan (issue 25): monthly and yearly, two
-- currencies, a legacy price kept for existing customers. Every mapped
-- price is one row here, a plan's or an add-on's, so that the primary key
-- makes "a price maps to one thing" a constraint rather than a convention;
-- a product maps every one of its prices. Owned by entitlements.

-- +goose Up
CREATE TABLE catalogue_prices (
    stripe_price_id text PRIMARY KEY CHECK (stripe_price_id <> '' AND length(stripe_price_id) <= 255),
    plan_key        text REFERENCES plans (key) ON DELETE CASCADE ON UPDATE CASCADE,
    addon_price_id  text REFERENCES addon_grants (stripe_price_id) ON DELETE CASCADE,
    -- order within the plan: 0 is the price self-serve offers by default.
    position        integer NOT NULL DEFAULT 0 CHECK (position >= 0),
    CHECK ((plan_key IS NULL) <> (addon_price_id IS NULL))
);
CREATE INDEX catalogue_prices_plan_idx ON catalogue_prices (plan_key, position) WHERE plan_key IS NOT NULL;
CREATE INDEX catalogue_prices_addon_idx ON catalogue_prices (addon_price_id) WHERE addon_price_id IS NOT NULL;

CREATE TABLE catalogue_products (
    stripe_product_id text PRIMARY KEY CHECK (stripe_product_id <> '' AND length(stripe_product_id) <= 255),
    plan_key          text UNIQUE REFERENCES plans (key) ON DELETE CASCADE ON UPDATE CASCADE,
    addon_price_id    text UNIQUE REFERENCES addon_grants (stripe_price_id) ON DELETE CASCADE,
    CHECK ((plan_key IS NULL) <> (addon_price_id IS NULL))
);

-- The price's product, so that a product mapping finds the item.
ALTER TABLE subscription_items ADD COLUMN product_id text;

-- Existing single prices become the first (default) price of their plan,
-- and each add-on's own price its first price.
INSERT INTO catalogue_prices (stripe_price_id, plan_key, position)
SELECT stripe_price_id, key, 0 FROM plans WHERE stripe_price_id IS NOT NULL;
INSERT INTO catalogue_prices (stripe_price_id, addon_price_id, position)
SELECT a.stripe_price_id, a.stripe_price_id, 0 FROM addon_grants a
 WHERE NOT EXISTS (SELECT 1 FROM catalogue_prices c WHERE c.stripe_price_id = a.stripe_price_id);

-- +goose Down
ALTER TABLE subscription_items DROP COLUMN product_id;
DROP TABLE catalogue_products;
DROP TABLE catalogue_prices;
