-- Stripe billing credits (issue 26 point 5): a grant mirroring a Stripe
-- credit grant keeps the `updated` time of the Stripe object it last
-- applied, so that an older event delivered late (Stripe does not order its
-- deliveries) never puts back an expiry a newer one changed. Owned by
-- credits.

-- +goose Up
ALTER TABLE credit_grants ADD COLUMN source_updated_at timestamptz;

-- +goose Down
ALTER TABLE credit_grants DROP COLUMN source_updated_at;
