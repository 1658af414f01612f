-- Plans a tenant may pick on its dashboard (issue 14): public plans with a
-- Stripe price are offered for self-serve upgrades; internal ones (custom
-- deals, staff, legacy) are assigned by an admin only. Existing plans stay
-- offered, as they were before the column existed.

-- +goose Up
ALTER TABLE plans ADD COLUMN public boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE plans DROP COLUMN public;
