-- Service tokens: credentials of backends that run the limiter outside
-- Tollgate. They can read entitlement snapshots and durable usage (the
-- limiter's remote loaders) and nothing else; only their hash is stored.

-- +goose Up
CREATE TABLE service_tokens (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    prefix       text NOT NULL,
    hash         bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    name         text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- +goose Down
DROP TABLE service_tokens;
