-- Plan versions (issue 25): an edit of a plan's limits may keep the
-- tenants on it on what they bought (grandfathering). The limits of a
-- version tenants still hold are kept here; the plan row is always the
-- current version. Owned by entitlements.

-- +goose Up
CREATE TABLE plan_versions (
    plan_key   text NOT NULL REFERENCES plans (key) ON DELETE CASCADE ON UPDATE CASCADE,
    version    bigint NOT NULL CHECK (version >= 1),
    -- the plan as it was (the admin API's Plan JSON): rate, concurrency,
    -- quotas, features, quota_window.
    plan       jsonb NOT NULL CHECK (jsonb_typeof(plan) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan_key, version)
);

-- The version a grandfathered tenant keeps; NULL = the plan's current one.
ALTER TABLE tenants ADD COLUMN plan_version bigint CHECK (plan_version >= 1);
CREATE INDEX tenants_plan_version_idx ON tenants (plan_key, plan_version) WHERE plan_version IS NOT NULL;

-- A price pinned to a version of its plan (a legacy price keeps its limits).
ALTER TABLE catalogue_prices ADD COLUMN plan_version bigint CHECK (plan_version >= 1);

-- +goose Down
ALTER TABLE catalogue_prices DROP COLUMN plan_version;
DROP INDEX tenants_plan_version_idx;
ALTER TABLE tenants DROP COLUMN plan_version;
DROP TABLE plan_versions;
