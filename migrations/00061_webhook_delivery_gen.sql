-- A delivery's generation (issue 27): "retry now" and "replay" bump it and
-- enqueue a new job carrying it, so a job still waiting on the backoff
-- (an older generation) finds itself superseded and sends nothing; one
-- delivery is never sent by two jobs at once. Owned by notify.

-- +goose Up
ALTER TABLE webhook_deliveries ADD COLUMN gen int NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE webhook_deliveries DROP COLUMN gen;
