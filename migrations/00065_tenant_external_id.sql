-- A backend's own id for a tenant (issue 23 point 8): optional, unique and
-- case-sensitive, so that a backend can address the tenant (limiter,
-- service routes, Envoy descriptors, Checkout metadata.tenant_id) by the id
-- it already has. The charset keeps it safe in a URL path segment, a Redis
-- key and a hash tag: no '{', '}', '/', space or '%'. Owned by
-- entitlements, which validates it first and names the field.

-- +goose Up
ALTER TABLE tenants ADD COLUMN external_id text
    CONSTRAINT tenants_external_id_key UNIQUE
    CONSTRAINT tenants_external_id_check CHECK (external_id ~ '^[A-Za-z0-9._:@-]{1,128}$');

-- +goose Down
ALTER TABLE tenants DROP COLUMN external_id;
