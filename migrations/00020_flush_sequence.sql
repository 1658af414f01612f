-- A Redis failover that promotes a replica behind its master (asynchronous
-- replication) keeps the keys but loses their last writes: the promoted
-- node's counters, flushed marks and claims are older than what Postgres
-- has committed from the old master. Each counter's flushes are numbered:
-- flush_seq is how many claims of the counter Postgres has counted, and the
-- Redis state hash keeps the figure its last acknowledgement saw. A claim
-- whose figure is behind Postgres's comes from a rolled-back hash: its
-- units are the old master's, already counted, so it is recorded as not
-- counted (counted = false, so that a replay is not counted either) and the
-- worker rebases the Redis counter on Postgres's figure.

-- +goose Up
ALTER TABLE usage_periods ADD COLUMN flush_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_flushes ADD COLUMN counted boolean NOT NULL DEFAULT true;
-- The flush_seq a counted claim got (NULL before this migration): the
-- replay of a claim after which others were counted is stale too.
ALTER TABLE usage_flushes ADD COLUMN seq bigint;

-- +goose Down
ALTER TABLE usage_flushes DROP COLUMN seq;
ALTER TABLE usage_flushes DROP COLUMN counted;
ALTER TABLE usage_periods DROP COLUMN flush_seq;
