-- Rollover of unused included units (issue 26 point 6): a plan's quota may
-- say how many units left at a period's close become a rollover grant, and
-- for how many periods that grant lasts. Owned by entitlements (the column)
-- and credits (the grants it makes).

-- +goose Up
ALTER TABLE plan_quotas ADD COLUMN rollover jsonb
    CHECK (rollover IS NULL OR jsonb_typeof(rollover) = 'object');

-- +goose Down
ALTER TABLE plan_quotas DROP COLUMN rollover;
