package billing

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
)

// EventState is a Stripe event as the audit trail records it before and
// after an admin replays it: its type, status, attempts and last error; nil
// when there is no such event. Registered with audit.Log.Read at wiring, so
// the trail never reads stripe_events itself.
func (s *Service) EventState(ctx context.Context, id string) json.RawMessage {
	var b []byte
	err := s.db.QueryRow(ctx, `
SELECT jsonb_build_object('type', e.type, 'status', e.status, 'attempts', e.attempts, 'last_error', e.last_error)
  FROM stripe_events e WHERE e.id = $1`, id).Scan(&b)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			s.log.WarnContext(ctx, "billing: event state for the audit trail not read", "event_id", id, "err", err)
		}
		return nil
	}
	return b
}

// EventTenant is the tenant a Stripe event was applied to; "" when none or
// no such event.
func (s *Service) EventTenant(ctx context.Context, id string) string {
	var tid *string
	err := s.db.QueryRow(ctx, `SELECT tenant_id::text FROM stripe_events WHERE id = $1`, id).Scan(&tid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.log.WarnContext(ctx, "billing: event tenant for the audit trail not read", "event_id", id, "err", err)
	}
	if tid == nil {
		return ""
	}
	return *tid
}
