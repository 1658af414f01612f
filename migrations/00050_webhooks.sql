-- Outbound webhooks (issue 27): endpoints, the durable outbox of events and
-- one delivery per event and endpoint. Owned by notify.

-- +goose Up
CREATE TABLE webhook_endpoints (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    url         text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    -- event types the endpoint takes; empty = every type.
    events      text[] NOT NULL DEFAULT '{}',
    description text NOT NULL DEFAULT '',
    enabled     boolean NOT NULL DEFAULT true,
    -- whsec_… signing secrets. Signing needs the key itself, so it cannot
    -- be hashed; it never leaves the server after creation.
    secret      text NOT NULL,
    -- the secret before the last rotation, still signing until prev_until.
    prev_secret text,
    prev_until  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The outbox: one row per event, written in the transaction of the change
-- that caused it. dedupe_key (when set) makes an event exactly-once: a
-- quota threshold per tenant, meter, window and threshold.
CREATE TABLE webhook_events (
    id         text PRIMARY KEY,
    type       text NOT NULL,
    payload    jsonb NOT NULL,
    dedupe_key text UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_deliveries (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id      text NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    endpoint_id   uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts      int NOT NULL DEFAULT 0,
    last_code     int,
    last_body     text,
    last_error    text,
    last_attempt_at timestamptz,
    delivered_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id DESC);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_events;
DROP TABLE webhook_endpoints;
