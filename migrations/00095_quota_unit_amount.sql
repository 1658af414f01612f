-- Stripe billing credits (issue 26 point 5): a quota may say what one unit
-- costs (Stripe's unit_amount_decimal, in the currency's smallest unit), so
-- that a credit grant converts to units when its price cannot be read from
-- Stripe (no secret key, or a tiered price). Owned by the catalogue
-- (entitlements until it moves). Text, not numeric: the decimal reads back
-- as it was written, as Stripe's does.

-- +goose Up
ALTER TABLE plan_quotas
  ADD COLUMN unit_amount_decimal text CHECK (unit_amount_decimal ~ '^[0-9]{1,12}(\.[0-9]{1,12})?$' AND unit_amount_decimal::numeric > 0),
  ADD COLUMN currency text CHECK (currency ~ '^[a-z]{3}$'),
  ADD CONSTRAINT plan_quotas_unit_price_both CHECK ((unit_amount_decimal IS NULL) = (currency IS NULL));

-- +goose Down
ALTER TABLE plan_quotas DROP CONSTRAINT plan_quotas_unit_price_both,
  DROP COLUMN currency, DROP COLUMN unit_amount_decimal;
