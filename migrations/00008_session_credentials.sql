-- +goose Up
-- A web session ends with the credential that opened it: a dashboard
-- session opened with an API key dies when the key is revoked (or deleted),
-- a console session when ADMIN_TOKEN changes (the hash of the token it was
-- opened with no longer matches the process's).
ALTER TABLE web_sessions
    ADD COLUMN api_key_id uuid REFERENCES api_keys (id) ON DELETE CASCADE,
    ADD COLUMN admin_token_hash bytea;
CREATE INDEX web_sessions_api_key_id ON web_sessions (api_key_id) WHERE api_key_id IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS web_sessions_api_key_id;
ALTER TABLE web_sessions DROP COLUMN IF EXISTS admin_token_hash, DROP COLUMN IF EXISTS api_key_id;
