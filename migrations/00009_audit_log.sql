-- The audit trail of admin actions (plan edits, plan changes, overrides,
-- API key issues and revocations, replays, resyncs, dashboard links): who,
-- when, what, and the subject's state before and after. Owned by
-- internal/audit. No foreign keys: the trail outlives what it describes.
-- Console sessions remember which named admin credential opened them.

-- +goose Up
CREATE TABLE audit_log (
    id        bigserial PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    actor     text NOT NULL,
    via       text NOT NULL CHECK (via IN ('api', 'console')),
    action    text NOT NULL,
    tenant_id uuid,
    plan_key  text,
    target    text,
    before    jsonb,
    after     jsonb
);
CREATE INDEX audit_log_tenant_idx ON audit_log (tenant_id, id DESC) WHERE tenant_id IS NOT NULL;
CREATE INDEX audit_log_plan_idx ON audit_log (plan_key, id DESC) WHERE plan_key IS NOT NULL;
CREATE INDEX audit_log_actor_idx ON audit_log (actor, id DESC);
ALTER TABLE web_sessions ADD COLUMN actor text;

-- +goose Down
ALTER TABLE web_sessions DROP COLUMN actor;
DROP TABLE audit_log;
