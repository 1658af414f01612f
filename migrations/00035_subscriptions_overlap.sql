-- Several subscriptions per customer (issue 25): a re-subscribe or a second
-- Checkout runs beside the old subscription until its period ends, and an
-- add-on may be billed as its own subscription. The tenant's plan, seats and
-- period come from one of them, chosen by what Stripe says about each (not by
-- the order their events arrived in), and add-ons from all live ones.

-- +goose Up
ALTER TABLE subscriptions
    -- Stripe's start_date and created: the live plan subscription started
    -- last carries the plan; ties by created, then id.
    ADD COLUMN start_date     timestamptz,
    ADD COLUMN stripe_created timestamptz,
    -- false when no item's price maps to a plan (an add-on billed on its
    -- own): such a subscription grants its add-ons, never the plan.
    ADD COLUMN has_plan_item  boolean NOT NULL DEFAULT true;
CREATE INDEX subscriptions_tenant_order_idx ON subscriptions (tenant_id, start_date DESC NULLS LAST);

-- +goose Down
DROP INDEX subscriptions_tenant_order_idx;
ALTER TABLE subscriptions DROP COLUMN start_date, DROP COLUMN stripe_created, DROP COLUMN has_plan_item;
