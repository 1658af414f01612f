-- Idempotency-Key on admin POSTs: the first answer to a key is kept for a
-- day, so that a retried request (a script run twice, a timeout) gets that
-- answer again instead of a second override or tenant. status 0 marks a
-- request still in progress. Owned by internal/idempotency.

-- +goose Up
CREATE TABLE idempotency_keys (
    scope        text        NOT NULL, -- the admin actor: one actor's keys never collide with another's
    key          text        NOT NULL,
    request_hash bytea       NOT NULL, -- sha256 of method, path and body
    status       integer     NOT NULL DEFAULT 0,
    content_type text        NOT NULL DEFAULT '',
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

-- +goose Down
DROP TABLE idempotency_keys;
