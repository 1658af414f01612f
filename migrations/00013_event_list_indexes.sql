-- Indexes for the console's Stripe events list: newest first, keyset-paged
-- on (received_at, id), optionally filtered by status. Without the first,
-- the unfiltered list sorted the whole table for every page (a parallel
-- sequential scan: 178 ms over 200,000 events, against 0.2 ms with it); the
-- older status index left the id tie-break to a sort. A search by customer
-- is served by stripe_events_customer_idx (one customer's events are few).

-- +goose Up
CREATE INDEX IF NOT EXISTS stripe_events_received_idx ON stripe_events (received_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS stripe_events_status_received_idx ON stripe_events (status, received_at DESC, id DESC);
DROP INDEX IF EXISTS stripe_events_status_idx;

-- +goose Down
CREATE INDEX IF NOT EXISTS stripe_events_status_idx ON stripe_events (status, received_at DESC);
DROP INDEX IF EXISTS stripe_events_status_received_idx;
DROP INDEX IF EXISTS stripe_events_received_idx;
