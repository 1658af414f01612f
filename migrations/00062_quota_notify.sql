-- Quota thresholds that send quota.threshold webhooks (issue 27), per plan
-- quota and per tenant override: a JSON list of {"percent": n} or
-- {"units": n}; NULL = the default (80% and 100%). Owned by entitlements.

-- +goose Up
ALTER TABLE plan_quotas ADD COLUMN notify jsonb;
ALTER TABLE quota_overrides ADD COLUMN notify jsonb;
-- An override may now change only the thresholds.
ALTER TABLE quota_overrides DROP CONSTRAINT quota_overrides_check;
ALTER TABLE quota_overrides ADD CONSTRAINT quota_overrides_check
    CHECK (extra IS NOT NULL OR quota_limit IS NOT NULL OR mode IS NOT NULL OR notify IS NOT NULL);

-- +goose Down
DELETE FROM quota_overrides WHERE extra IS NULL AND quota_limit IS NULL AND mode IS NULL;
ALTER TABLE quota_overrides DROP CONSTRAINT quota_overrides_check;
ALTER TABLE quota_overrides ADD CONSTRAINT quota_overrides_check
    CHECK (extra IS NOT NULL OR quota_limit IS NOT NULL OR mode IS NOT NULL);
ALTER TABLE quota_overrides DROP COLUMN notify;
ALTER TABLE plan_quotas DROP COLUMN notify;
