-- Stripe as real accounts send it (issue 9): a subscription has several
-- items (the plan's price, add-ons, metered overage), a plan may count
-- quotas per seat, and add-on prices grant extra quota or features.

-- +goose Up
-- Every item of a subscription as last applied; the one whose price maps to
-- a plan decides the plan (its quantity is the seat count), the ones whose
-- price maps to an add-on grant add to the entitlements. Owned by billing.
CREATE TABLE subscription_items (
    subscription_id text NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    item_id         text NOT NULL,
    price_id        text NOT NULL,
    quantity        bigint NOT NULL DEFAULT 1 CHECK (quantity >= 0),
    PRIMARY KEY (subscription_id, item_id)
);
CREATE INDEX subscription_items_price_idx ON subscription_items (price_id);

ALTER TABLE subscriptions
    -- quantity of the plan item: the seats per-seat quotas multiply by.
    ADD COLUMN plan_quantity bigint NOT NULL DEFAULT 1 CHECK (plan_quantity >= 0),
    -- invoice.paid ends grace only for this invoice (older ones say nothing
    -- about the subscription now).
    ADD COLUMN latest_invoice_id text,
    -- the event whose state is applied: a same-second event is ordered
    -- against it through its previous_attributes.
    ADD COLUMN last_event_id text,
    -- when the state applied was read from Stripe (events as notifications
    -- with STRIPE_SECRET_KEY): an older read never overwrites a newer one.
    ADD COLUMN fetched_at timestamptz,
    -- pause_collection.behavior while payment collection is paused.
    ADD COLUMN pause_collection text;

-- A quota a plan counts per seat: limit × the plan item's quantity.
ALTER TABLE plan_quotas ADD COLUMN per_seat boolean NOT NULL DEFAULT false;

-- What an add-on price grants per unit of its item's quantity, while the
-- subscription gives the tenant its own plan. Owned by entitlements.
CREATE TABLE addon_grants (
    stripe_price_id text PRIMARY KEY CHECK (stripe_price_id <> ''),
    name            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- meter -> extra quota units per unit of quantity
    quotas          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(quotas) = 'object'),
    features        text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Plan changes sent to Stripe: the attempt number goes into the idempotency
-- key, and moves on after Stripe answered an error, because Stripe replays a
-- saved answer (a 500 included) for 24 hours under the same key. Owned by
-- billing.
CREATE TABLE stripe_plan_changes (
    base_key    text PRIMARY KEY,
    attempt     integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    last_error  text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE stripe_plan_changes;
DROP TABLE addon_grants;
ALTER TABLE plan_quotas DROP COLUMN per_seat;
ALTER TABLE subscriptions DROP COLUMN plan_quantity, DROP COLUMN latest_invoice_id, DROP COLUMN last_event_id,
    DROP COLUMN fetched_at, DROP COLUMN pause_collection;
DROP TABLE subscription_items;
