-- The tenant's current subscription, defined once (issue 24): the limiter
-- enforces what the snapshot computes from it, so metering's periods,
-- billing's plan changes and the console must pick the same row. Of the
-- subscriptions with a plan item (an add-on billed on its own never carries
-- the plan), the live one (active, trialing or past_due) that started last
-- (Stripe's start_date, then created, then id), else the one that started
-- last; no row for a tenant that never had one. The order uses only what
-- Stripe says about each subscription, never when its events were applied,
-- so that any delivery order of a customer's events ends on the same
-- subscription (issue 25); updated_at only orders rows stored before
-- start_date was. Owned by entitlements, read by any package.
--
-- Query it per tenant: WHERE tenant_id = …, a correlated scalar subquery,
-- or LATERAL (SELECT * FROM current_subscriptions c WHERE c.tenant_id =
-- t.id LIMIT 1). The condition is on the DISTINCT ON column, so Postgres
-- pushes it down to the tenant_id indexes instead of ranking every row;
-- in a LATERAL join the LIMIT 1 keeps the subquery from being flattened
-- into a join that ranks the whole table first.
-- The column list is fixed when the view is made: a migration that adds a
-- column to subscriptions and wants it here recreates the view.

-- +goose Up
CREATE VIEW current_subscriptions AS
SELECT DISTINCT ON (tenant_id) *
  FROM subscriptions
 WHERE has_plan_item
 ORDER BY tenant_id, (status IN ('active', 'trialing', 'past_due')) DESC, start_date DESC NULLS LAST,
          stripe_created DESC NULLS LAST, updated_at DESC, id DESC;

-- +goose Down
DROP VIEW current_subscriptions;
