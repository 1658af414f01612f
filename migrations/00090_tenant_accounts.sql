-- Two views entitlements owns for metering's reads (issue 24: reads through
-- owners): metering needs, for many tenants at once and inside its flush
-- transaction, what the entitlement snapshot computes a period from, a
-- tenant's Stripe customer, and which of a plan's quotas are reported to
-- Stripe. A Go call per tenant would cost the flush's hot query a round trip
-- each; a view keeps one statement while the joins over tenants, plans,
-- plan_quotas and the current subscription stay written once, here, by
-- their owner. Read by any package.
--
-- tenant_accounts: one row per tenant: its plan, Stripe customer, period
-- anchor, its current subscription's period (NULL without one) and its
-- plan's quota window (the inputs of period.In). Query it per tenant (WHERE
-- tenant_id = …, or joined on tenant_id): the condition reaches tenants'
-- primary key and, through the LATERAL's LIMIT 1, current_subscriptions'
-- tenant_id index.
--
-- tenant_reported_quotas: per tenant with a Stripe customer, the quotas of
-- its plan that name a Stripe meter event, with how they are reported.
--
-- The column lists are fixed when a view is made: a migration that needs
-- another column recreates the view.

-- +goose Up
CREATE VIEW tenant_accounts AS
SELECT t.id AS tenant_id, t.plan_key, t.stripe_customer_id, t.period_anchor,
       s.current_period_start, s.current_period_end, p.quota_window
  FROM tenants t
  JOIN plans p ON p.key = t.plan_key
  LEFT JOIN LATERAL (SELECT c.current_period_start, c.current_period_end FROM current_subscriptions c
                      WHERE c.tenant_id = t.id LIMIT 1) s ON true;

CREATE VIEW tenant_reported_quotas AS
SELECT t.id AS tenant_id, q.meter, q.stripe_meter_event, q.stripe_report, q.quota_limit
  FROM tenants t
  JOIN plan_quotas q ON q.plan_key = t.plan_key
 WHERE t.stripe_customer_id IS NOT NULL AND q.stripe_meter_event IS NOT NULL;

-- +goose Down
DROP VIEW tenant_reported_quotas;
DROP VIEW tenant_accounts;
