package entitlements

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TenantsOnPlan is how many tenants are on plan key: the audit trail's
// state of a plan names it beside the catalogue's (audit/readers).
func (s *Service) TenantsOnPlan(ctx context.Context, key string) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE plan_key = $1`, key).Scan(&n); err != nil {
		return 0, fmt.Errorf("entitlements: tenants on plan: %w", err)
	}
	return n, nil
}

// auditState runs q, a query of one jsonb row for id; nil when there is no
// row. A failure is logged: the trail records the action either way.
func (s *Service) auditState(ctx context.Context, what, id, q string) json.RawMessage {
	var b []byte
	if err := s.db.QueryRow(ctx, q, id).Scan(&b); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			s.log.WarnContext(ctx, "entitlements: "+what+" state for the audit trail not read", "id", id, "err", err)
		}
		return nil
	}
	return b
}

// TenantState is a tenant as the audit trail records it before and after a
// change: name, plan, Stripe customer, external id, entitlement version and
// its quota overrides; nil when there is no such tenant. (Its API keys are
// credentials'; audit/readers adds them.)
func (s *Service) TenantState(ctx context.Context, id string) json.RawMessage {
	return s.auditState(ctx, "tenant", id, `
SELECT jsonb_build_object(
  'name', t.name, 'plan', t.plan_key, 'stripe_customer_id', t.stripe_customer_id,
  'external_id', t.external_id, 'entitlement_version', t.entitlement_version,
  'overrides', COALESCE((SELECT jsonb_agg(jsonb_build_object('id', o.id, 'meter', o.meter, 'extra', o.extra,
        'limit', o.quota_limit, 'mode', o.mode, 'reason', o.reason, 'expires_at', o.expires_at) ORDER BY o.created_at)
      FROM quota_overrides o WHERE o.tenant_id = t.id), '[]'::jsonb))
FROM tenants t WHERE t.id = $1::uuid`)
}
