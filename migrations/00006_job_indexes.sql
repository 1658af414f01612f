-- Indexes for the periodic jobs, which otherwise scan whole tables every
-- minute (or every 10 seconds), and for the retention jobs.

-- +goose Up
-- metering.ClosePeriods prunes flush records by age.
CREATE INDEX IF NOT EXISTS usage_flushes_flushed_idx ON usage_flushes (flushed_at);
-- (stripe_meter_reports' lookups are indexed by 00004.)
-- entitlements.RefreshExpiredOverrides (every 10 s) and the retention of
-- expired overrides look overrides up by expiry; most never expire.
CREATE INDEX IF NOT EXISTS quota_overrides_expires_idx ON quota_overrides (expires_at) WHERE expires_at IS NOT NULL;
-- Retention: usage events and entitlement versions by age.
CREATE INDEX IF NOT EXISTS usage_events_received_idx ON usage_events (received_at);
CREATE INDEX IF NOT EXISTS entitlement_versions_created_idx ON entitlement_versions (created_at);

-- +goose Down
DROP INDEX IF EXISTS entitlement_versions_created_idx;
DROP INDEX IF EXISTS usage_events_received_idx;
DROP INDEX IF EXISTS quota_overrides_expires_idx;
DROP INDEX IF EXISTS usage_flushes_flushed_idx;
