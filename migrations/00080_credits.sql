-- Credits (issue 26): prepaid grants of a meter's units next to the plan's
-- included quota, the ledger of what each grant gave per period, Stripe
-- purchases already granted, and the top-up prices. Owned by credits.

-- +goose Up
-- One grant. Its four buckets always add up to its amount (the CHECK):
-- units are consumed (drawn by decisions), remaining, expired (what was left
-- at expires_at) or voided (what was left when an admin voided it). A grant
-- is closed once (voided or expired, never both) and then has nothing
-- remaining; units the limiter drew before the close took effect are taken
-- back from the closed bucket, so the sum still holds.
CREATE TABLE credit_grants (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    meter        text NOT NULL CHECK (meter ~ '^[a-z0-9_.-]{1,64}$'),
    amount       bigint NOT NULL CHECK (amount > 0),
    consumed     bigint NOT NULL DEFAULT 0 CHECK (consumed >= 0),
    remaining    bigint NOT NULL CHECK (remaining >= 0),
    expired      bigint NOT NULL DEFAULT 0 CHECK (expired >= 0),
    voided       bigint NOT NULL DEFAULT 0 CHECK (voided >= 0),
    -- drawn lowest first (as Stripe's credit grants), 0-100.
    priority     int NOT NULL CHECK (priority BETWEEN 0 AND 100),
    effective_at timestamptz NOT NULL,
    expires_at   timestamptz,
    source       text NOT NULL CHECK (source IN ('admin', 'topup', 'stripe_credit', 'rollover')),
    -- what made it, unique per source: a purchase and price (topup), a
    -- Stripe credit grant id, a closed period (rollover); NULL for admin.
    source_ref   text,
    reason       text NOT NULL DEFAULT '',
    voided_at    timestamptz,
    expired_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT credit_grants_balanced CHECK (amount = consumed + remaining + expired + voided),
    CONSTRAINT credit_grants_expiry_after_effective CHECK (expires_at IS NULL OR expires_at > effective_at),
    CONSTRAINT credit_grants_closed_once CHECK (voided_at IS NULL OR expired_at IS NULL),
    CONSTRAINT credit_grants_closed_empty CHECK ((voided_at IS NULL AND expired_at IS NULL) OR remaining = 0),
    CONSTRAINT credit_grants_source_ref UNIQUE (source, source_ref)
);
CREATE INDEX credit_grants_tenant_idx ON credit_grants (tenant_id, meter, created_at);
CREATE INDEX credit_grants_open_expiry_idx ON credit_grants (expires_at)
    WHERE voided_at IS NULL AND expired_at IS NULL AND expires_at IS NOT NULL;

-- What each grant gave in each usage period (the period's start, as
-- usage_periods names it); the sum over a grant's rows is its consumed.
CREATE TABLE credit_consumption (
    grant_id     uuid NOT NULL REFERENCES credit_grants (id) ON DELETE CASCADE,
    period_start timestamptz NOT NULL,
    consumed     bigint NOT NULL DEFAULT 0 CHECK (consumed >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (grant_id, period_start)
);

-- One row per (flush, grant) recorded: a replayed flush finds its row and
-- adds nothing. attributed is what the grant could take of quantity.
CREATE TABLE credit_flushes (
    flush_id     text NOT NULL CHECK (length(flush_id) BETWEEN 1 AND 255),
    grant_id     uuid NOT NULL REFERENCES credit_grants (id) ON DELETE CASCADE,
    period_start timestamptz NOT NULL,
    quantity     bigint NOT NULL,
    attributed   bigint NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flush_id, grant_id)
);
CREATE INDEX credit_flushes_recorded_idx ON credit_flushes (recorded_at);

-- Every Stripe id under which a purchase was seen (the Checkout Session,
-- its invoice, its payment intent): a purchase is granted once, whichever
-- of its events comes first and however often each is replayed.
CREATE TABLE credit_purchases (
    purchase_key text PRIMARY KEY,
    purchase_id  text NOT NULL,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_purchases_purchase_idx ON credit_purchases (purchase_id);

-- One-time Stripe prices that buy units: a purchase of quantity q grants
-- q × amount units of meter, expiring expires_in_seconds after the purchase.
CREATE TABLE credit_topups (
    stripe_price_id    text PRIMARY KEY CHECK (length(stripe_price_id) BETWEEN 1 AND 255),
    meter              text NOT NULL CHECK (meter ~ '^[a-z0-9_.-]{1,64}$'),
    amount             bigint NOT NULL CHECK (amount > 0),
    expires_in_seconds bigint CHECK (expires_in_seconds > 0),
    priority           int NOT NULL DEFAULT 50 CHECK (priority BETWEEN 0 AND 100),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE credit_topups;
DROP TABLE credit_purchases;
DROP TABLE credit_flushes;
DROP TABLE credit_consumption;
DROP TABLE credit_grants;
