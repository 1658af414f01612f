-- Window limits of a plan (issue 29): "5,000 an hour" next to the token
-- bucket, each {"name", "limit", "length" (milliseconds), "kind"}. A JSONB
-- array on the plan, as plan_versions keeps the plan as JSON: a version
-- carries its windows without a table of its own. Owned by entitlements,
-- which validates the entries (name, limit, length, kind).

-- +goose Up
ALTER TABLE plans ADD COLUMN windows jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(windows) = 'array');

-- +goose Down
ALTER TABLE plans DROP COLUMN windows;
