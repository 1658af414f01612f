-- Webhook endpoints failing for 5 days straight are disabled (issue 27):
-- failing_since is the first failed attempt since the last success;
-- disabled_at/disabled_reason say when and why the sender disabled one
-- (cleared when an admin enables it again). Owned by notify.

-- +goose Up
ALTER TABLE webhook_endpoints
    ADD COLUMN failing_since   timestamptz,
    ADD COLUMN disabled_at     timestamptz,
    ADD COLUMN disabled_reason text;

-- +goose Down
ALTER TABLE webhook_endpoints
    DROP COLUMN failing_since,
    DROP COLUMN disabled_at,
    DROP COLUMN disabled_reason;
