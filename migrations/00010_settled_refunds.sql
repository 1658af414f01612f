-- Reservations (limiter.Request.Reserve) settled below their estimate give
-- units back: the limiter's pending counter may then hold a negative
-- growth, flushed like any other. A flush batch is any non-zero quantity;
-- usage_periods.used stays >= 0 (a refund never exceeds what was charged).

-- +goose Up
ALTER TABLE usage_flushes DROP CONSTRAINT usage_flushes_quantity_check;
ALTER TABLE usage_flushes ADD CONSTRAINT usage_flushes_quantity_check CHECK (quantity <> 0);

-- +goose Down
DELETE FROM usage_flushes WHERE quantity < 0;
ALTER TABLE usage_flushes DROP CONSTRAINT usage_flushes_quantity_check;
ALTER TABLE usage_flushes ADD CONSTRAINT usage_flushes_quantity_check CHECK (quantity >= 0);
