package catalogue

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
)

// PlanState is a plan as the audit trail records it before and after a
// change: name, Stripe price, rate, concurrency, features, quotas and, when
// the column exists, whether it is public; nil when there is no such plan.
// How many tenants are on it is entitlements' to say (audit/readers adds
// it). Registered with audit.Log.Read at wiring, so the trail never reads
// plans itself.
func (s *Service) PlanState(ctx context.Context, key string) json.RawMessage {
	return s.auditState(ctx, "plan", key, `
SELECT jsonb_build_object(
  'name', p.name, 'stripe_price_id', p.stripe_price_id, 'rate_per_second', p.rate_per_second,
  'rate_burst', p.rate_burst, 'concurrency', p.concurrency, 'features', p.features,
  'quotas', COALESCE((SELECT jsonb_object_agg(q.meter, jsonb_build_object('limit', q.quota_limit, 'mode', q.mode))
      FROM plan_quotas q WHERE q.plan_key = p.key), '{}'::jsonb))
  || COALESCE((SELECT jsonb_build_object('public', to_jsonb(p) -> 'public') WHERE to_jsonb(p) ? 'public'), '{}'::jsonb)
FROM plans p WHERE p.key = $1`)
}

// AddonState is an add-on grant as the audit trail records it: its name,
// quotas and features; nil when the price grants nothing.
func (s *Service) AddonState(ctx context.Context, priceID string) json.RawMessage {
	return s.auditState(ctx, "add-on", priceID, `
SELECT jsonb_build_object('name', a.name, 'quotas', a.quotas, 'features', to_jsonb(a.features))
FROM addon_grants a WHERE a.stripe_price_id = $1`)
}

// auditState runs q, a query of one jsonb row for id; nil when there is no
// row. A failure is logged: the trail records the action either way.
func (s *Service) auditState(ctx context.Context, what, id, q string) json.RawMessage {
	var b []byte
	if err := s.db.QueryRow(ctx, q, id).Scan(&b); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			s.log.WarnContext(ctx, "catalogue: "+what+" state for the audit trail not read", "id", id, "err", err)
		}
		return nil
	}
	return b
}
