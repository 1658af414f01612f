-- Quota windows and metered billing (issue 9).
--
-- plans.quota_window: quotas reset monthly on the billing anchor day even on
-- a yearly price ('month', the default), or once per billing period.
-- plan_quotas.stripe_report: what a quota's Stripe meter is sent: the
-- overage above the included quota (default) or the total usage.
-- stripe_meter_reports: claimed_until leases a report to one sender;
-- event_time is the timestamp Stripe got; late marks usage that arrived after
-- its period's invoice window and was billed in the current period instead.

-- +goose Up
ALTER TABLE plans ADD COLUMN quota_window text NOT NULL DEFAULT 'month'
    CHECK (quota_window IN ('month', 'billing_period'));
ALTER TABLE plan_quotas ADD COLUMN stripe_report text NOT NULL DEFAULT 'overage'
    CHECK (stripe_report IN ('overage', 'total'));
ALTER TABLE stripe_meter_reports
    ADD COLUMN claimed_until timestamptz,
    ADD COLUMN event_time timestamptz,
    ADD COLUMN late boolean NOT NULL DEFAULT false,
    ADD COLUMN stripe_report text NOT NULL DEFAULT 'total' CHECK (stripe_report IN ('overage', 'total'));
CREATE INDEX stripe_meter_reports_todo_idx ON stripe_meter_reports (created_at) WHERE status <> 'sent';
CREATE INDEX stripe_meter_reports_period_idx ON stripe_meter_reports (tenant_id, meter, period_start);

-- +goose Down
DROP INDEX stripe_meter_reports_period_idx;
DROP INDEX stripe_meter_reports_todo_idx;
ALTER TABLE stripe_meter_reports DROP COLUMN stripe_report, DROP COLUMN late, DROP COLUMN event_time, DROP COLUMN claimed_until;
ALTER TABLE plan_quotas DROP COLUMN stripe_report;
ALTER TABLE plans DROP COLUMN quota_window;
