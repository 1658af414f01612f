package credentials

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/ids"
)

// KeysState is a tenant's API keys as the audit trail records them in the
// tenant's state: id, prefix, name and whether revoked, oldest first; never
// a hash. "[]" for none.
func (s *Service) KeysState(ctx context.Context, tenantID string) json.RawMessage {
	if !ids.IsUUID(tenantID) {
		return json.RawMessage("[]")
	}
	var b []byte
	err := s.db.QueryRow(ctx, `
SELECT COALESCE(jsonb_agg(jsonb_build_object('id', k.id, 'prefix', k.prefix, 'name', k.name,
         'revoked', k.revoked_at IS NOT NULL) ORDER BY k.created_at), '[]'::jsonb)
  FROM api_keys k WHERE k.tenant_id = $1`, tenantID).Scan(&b)
	if err != nil {
		s.log.WarnContext(ctx, "credentials: keys for the audit trail not read", "tenant_id", tenantID, "err", err)
		return json.RawMessage("[]")
	}
	return b
}

// KeyTenant is the tenant an API key belongs to; "" when no such key.
func (s *Service) KeyTenant(ctx context.Context, keyID string) string {
	if !ids.IsUUID(keyID) {
		return ""
	}
	var tid string
	err := s.db.QueryRow(ctx, `SELECT tenant_id::text FROM api_keys WHERE id = $1`, keyID).Scan(&tid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.log.WarnContext(ctx, "credentials: key tenant for the audit trail not read", "key_id", keyID, "err", err)
	}
	return tid
}

// ServiceTokenState is a service token as the audit trail records it: id,
// name, created and whether (and when) revoked, never its hash or the part
// of it a prefix shows (the trail is read by every admin); nil when none.
func (s *Service) ServiceTokenState(ctx context.Context, id string) json.RawMessage {
	if !ids.IsUUID(id) {
		return nil
	}
	var b []byte
	err := s.db.QueryRow(ctx, `
SELECT jsonb_build_object('id', s.id, 'name', s.name, 'created_at', s.created_at,
  'revoked', s.revoked_at IS NOT NULL, 'revoked_at', s.revoked_at)
FROM service_tokens s WHERE s.id = $1`, id).Scan(&b)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			s.log.WarnContext(ctx, "credentials: service token state for the audit trail not read", "id", id, "err", err)
		}
		return nil
	}
	return b
}
