-- Period anchors in whole seconds. The limiter names quota counters by the
-- Unix second of the period start, and usage_periods rows are keyed by the
-- same second; an anchor with a fraction of a second would give the api,
-- the worker and the entitlement snapshot period starts that differ by that
-- fraction. Stripe's periods are whole seconds already.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION tenants_anchor_seconds() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.period_anchor := date_trunc('second', NEW.period_anchor);
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER tenants_anchor_seconds BEFORE INSERT OR UPDATE OF period_anchor ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenants_anchor_seconds();
UPDATE tenants SET period_anchor = date_trunc('second', period_anchor)
 WHERE period_anchor <> date_trunc('second', period_anchor);

-- +goose Down
DROP TRIGGER tenants_anchor_seconds ON tenants;
DROP FUNCTION tenants_anchor_seconds();
