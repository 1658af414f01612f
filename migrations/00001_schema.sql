-- The whole product's schema. Postgres is the system of record: every limit,
-- subscription, Stripe event and unit of usage lives here; Redis only caches.

-- +goose Up
CREATE TABLE plans (
    key             text PRIMARY KEY CHECK (key ~ '^[a-z0-9_-]{1,64}$'),
    name            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    stripe_price_id text UNIQUE CHECK (stripe_price_id <> ''),
    -- rate: both NULL = unlimited.
    rate_per_second double precision CHECK (rate_per_second > 0),
    rate_burst      bigint CHECK (rate_burst >= 1),
    -- NULL = unlimited concurrency.
    concurrency     bigint CHECK (concurrency >= 1),
    features        text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate_per_second IS NULL) = (rate_burst IS NULL))
);

-- Monthly quotas per meter of a plan.
CREATE TABLE plan_quotas (
    plan_key    text NOT NULL REFERENCES plans (key) ON DELETE CASCADE ON UPDATE CASCADE,
    meter       text NOT NULL CHECK (meter ~ '^[a-z0-9_.-]{1,64}$'),
    quota_limit bigint NOT NULL CHECK (quota_limit >= 0),
    mode        text NOT NULL CHECK (mode IN ('hard', 'soft')),
    -- Stripe Billing Meter event name for overage reporting; NULL = not reported.
    stripe_meter_event text CHECK (stripe_meter_event <> ''),
    PRIMARY KEY (plan_key, meter)
);

CREATE TABLE tenants (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    plan_key            text NOT NULL REFERENCES plans (key) ON UPDATE CASCADE,
    stripe_customer_id  text UNIQUE CHECK (stripe_customer_id <> ''),
    -- Stripe Entitlements feature lookup keys, merged into the plan's features.
    stripe_features     text[] NOT NULL DEFAULT '{}',
    -- Anchor of monthly periods for tenants without a subscription.
    period_anchor       timestamptz NOT NULL DEFAULT now(),
    entitlement_version bigint NOT NULL DEFAULT 1 CHECK (entitlement_version >= 1),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenants_name_lower_idx ON tenants (lower(name) text_pattern_ops);
CREATE INDEX tenants_created_idx ON tenants (created_at, id);
CREATE INDEX tenants_plan_idx ON tenants (plan_key);

-- API keys are stored only as a SHA-256 hash; prefix is what people see.
CREATE TABLE api_keys (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    prefix       text NOT NULL,
    hash         bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    name         text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id, created_at);

CREATE TABLE subscriptions (
    id                   text PRIMARY KEY,              -- Stripe sub_…
    tenant_id            uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    stripe_customer_id   text NOT NULL,
    stripe_price_id      text,
    stripe_item_id       text,
    status               text NOT NULL,
    current_period_start timestamptz,
    current_period_end   timestamptz,
    cancel_at_period_end boolean NOT NULL DEFAULT false,
    trial_end            timestamptz,
    trial_will_end_at    timestamptz,                   -- from trial_will_end, shown to tenant and admins
    past_due_since       timestamptz,
    grace_ends_at        timestamptz,
    payment_attempts     integer NOT NULL DEFAULT 0,
    next_payment_attempt timestamptz,
    canceled_at          timestamptz,
    -- created time of the last Stripe event applied: an older event is stale.
    last_event_at        timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK (current_period_end IS NULL OR current_period_start IS NULL OR current_period_end > current_period_start)
);
CREATE INDEX subscriptions_tenant_idx ON subscriptions (tenant_id, updated_at DESC);
CREATE INDEX subscriptions_customer_idx ON subscriptions (stripe_customer_id);
CREATE INDEX subscriptions_grace_idx ON subscriptions (grace_ends_at) WHERE grace_ends_at IS NOT NULL;

-- Admin-granted changes to a tenant's quota for one meter.
CREATE TABLE quota_overrides (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    meter       text NOT NULL CHECK (meter ~ '^[a-z0-9_.-]{1,64}$'),
    extra       bigint CHECK (extra >= 0),               -- added to the plan's limit
    quota_limit bigint CHECK (quota_limit >= 0),         -- replaces the plan's limit
    mode        text CHECK (mode IN ('hard', 'soft')),
    reason      text NOT NULL DEFAULT '',
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (extra IS NOT NULL OR quota_limit IS NOT NULL OR mode IS NOT NULL)
);
CREATE INDEX quota_overrides_tenant_idx ON quota_overrides (tenant_id, meter);

-- Every change of what a tenant may do is a new version; the snapshot is what
-- the limiter was given.
CREATE TABLE entitlement_versions (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    version    bigint NOT NULL CHECK (version >= 1),
    reason     text NOT NULL,
    snapshot   jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, version)
);

CREATE TABLE stripe_events (
    id             text PRIMARY KEY,                     -- evt_…: dedupe and replay protection
    type           text NOT NULL,
    api_version    text NOT NULL DEFAULT '',
    livemode       boolean NOT NULL DEFAULT false,
    stripe_customer_id text,
    tenant_id      uuid REFERENCES tenants (id) ON DELETE SET NULL,
    event_created  timestamptz NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    payload        jsonb NOT NULL,
    status         text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processed', 'ignored', 'failed')),
    ignored_reason text,
    attempts       integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error     text,
    processed_at   timestamptz
);
CREATE INDEX stripe_events_status_idx ON stripe_events (status, received_at DESC);
CREATE INDEX stripe_events_customer_idx ON stripe_events (stripe_customer_id, event_created);
CREATE INDEX stripe_events_tenant_idx ON stripe_events (tenant_id, received_at DESC);

-- What resync found different from Stripe and changed.
CREATE TABLE drift_repairs (
    id              bigserial PRIMARY KEY,
    tenant_id       uuid REFERENCES tenants (id) ON DELETE CASCADE,
    subscription_id text,
    field           text NOT NULL,
    ours            text,
    stripe          text,
    repaired_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX drift_repairs_tenant_idx ON drift_repairs (tenant_id, repaired_at DESC);

-- Usage events sent by backends: counted once per (tenant, id), forever.
CREATE TABLE usage_events (
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    meter           text NOT NULL CHECK (meter ~ '^[a-z0-9_.-]{1,64}$'),
    quantity        bigint NOT NULL CHECK (quantity >= 0),
    occurred_at     timestamptz NOT NULL,
    period_start    timestamptz NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idempotency_key)
);

-- Durable meter per tenant, meter and period; closed_at marks the closing figure.
CREATE TABLE usage_periods (
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    meter        text NOT NULL CHECK (meter ~ '^[a-z0-9_.-]{1,64}$'),
    period_start timestamptz NOT NULL,
    period_end   timestamptz NOT NULL,
    used         bigint NOT NULL DEFAULT 0 CHECK (used >= 0),
    closed_at    timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, meter, period_start),
    CHECK (period_end > period_start)
);
CREATE INDEX usage_periods_open_idx ON usage_periods (period_end) WHERE closed_at IS NULL;

-- Batches moved from the limiter's Redis counters: the batch id makes a
-- replayed flush a no-op.
CREATE TABLE usage_flushes (
    batch_id     text PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    meter        text NOT NULL,
    period_start timestamptz NOT NULL,
    quantity     bigint NOT NULL CHECK (quantity >= 0),
    flushed_at   timestamptz NOT NULL DEFAULT now()
);

-- Hourly history for the dashboard's charts.
CREATE TABLE usage_hourly (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    meter     text NOT NULL,
    hour      timestamptz NOT NULL CHECK (date_trunc('hour', hour) = hour),
    used      bigint NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (tenant_id, meter, hour)
);

-- Refused requests per day and policy, flushed from the limiter's counters.
CREATE TABLE refusals_daily (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    day       date NOT NULL,
    policy    text NOT NULL,
    refused   bigint NOT NULL DEFAULT 0 CHECK (refused >= 0),
    PRIMARY KEY (tenant_id, day, policy)
);

-- Usage reported to Stripe Billing Meters; identifier is our idempotency key.
CREATE TABLE stripe_meter_reports (
    identifier   text PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    meter        text NOT NULL,
    event_name   text NOT NULL,
    period_start timestamptz NOT NULL,
    quantity     bigint NOT NULL CHECK (quantity >= 0),
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts     integer NOT NULL DEFAULT 0,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz
);

-- Single-use dashboard login links (only the token's hash is kept).
CREATE TABLE dashboard_links (
    token_hash bytea PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_links_expiry_idx ON dashboard_links (expires_at);

-- Browser sessions of tenants (dashboard) and billing admins (console).
CREATE TABLE web_sessions (
    id_hash    bytea PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('tenant', 'admin')),
    tenant_id  uuid REFERENCES tenants (id) ON DELETE CASCADE,
    csrf_token text NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'tenant') = (tenant_id IS NOT NULL))
);
CREATE INDEX web_sessions_expiry_idx ON web_sessions (expires_at);

-- +goose Down
DROP TABLE web_sessions, dashboard_links, stripe_meter_reports, refusals_daily, usage_hourly,
    usage_flushes, usage_periods, usage_events, drift_repairs, stripe_events,
    entitlement_versions, quota_overrides, subscriptions, api_keys, tenants, plan_quotas, plans;
