-- A plan's version (issue 14, "why this limit"): the explanation of a
-- tenant's limits names the plan version they came from, so that an admin
-- can tell "pro as it was before Tuesday's edit" from "pro now". A counter
-- rather than updated_at: two edits within one clock tick, or an edit
-- that a restored backup rolls back, must still read as different
-- versions, and "version 3" is what people quote. Bumped by entitlements
-- (the plans owner) on every edit.

-- +goose Up
ALTER TABLE plans ADD COLUMN version bigint NOT NULL DEFAULT 1 CHECK (version >= 1);

-- +goose Down
ALTER TABLE plans DROP COLUMN version;
