package notify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/credits"
)

// GrantChanged is the data of grant.low, grant.depleted and grant.expired:
// the grant as the change left it, and the units the change moved (what
// the draw took, or what expired).
type GrantChanged struct {
	TenantID string       `json:"tenant_id"`
	Meter    string       `json:"meter"`
	Units    int64        `json:"units"`
	Grant    GrantSummary `json:"grant"`
}

// GrantSummary is the part of a grant a receiver acts on.
type GrantSummary struct {
	ID        string     `json:"id"`
	Amount    int64      `json:"amount"`
	Remaining int64      `json:"remaining"`
	Consumed  int64      `json:"consumed"`
	Expired   int64      `json:"expired"`
	Source    string     `json:"source"`
	ExpiresAt *time.Time `json:"expires_at"`
	Reason    string     `json:"reason"`
}

var grantTypes = map[string]string{credits.EventLow: TypeGrantLow, credits.EventDepleted: TypeGrantDepleted, credits.EventExpired: TypeGrantExpired}

// GrantEvents writes one grant.* event per credits event in tx, the
// transaction of the draw or expiry (credits.Options.Events). Its key keeps
// each to one per grant: a replayed flush, a second worker's expiry job and
// a refund that lifts a grant back over the line and a draw that takes it
// under again announce nothing twice.
func (s *Service) GrantEvents(ctx context.Context, tx pgx.Tx, evs []credits.GrantEvent) error {
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		typ, ok := grantTypes[e.Kind]
		if !ok {
			continue
		}
		g := e.Grant
		out = append(out, Event{Type: typ, DedupeKey: typ + "/" + g.ID, Data: GrantChanged{
			TenantID: g.TenantID, Meter: g.Meter, Units: e.Units, Grant: GrantSummary{ID: g.ID, Amount: g.Amount,
				Remaining: g.Remaining, Consumed: g.Consumed, Expired: g.Expired, Source: g.Source, ExpiresAt: g.ExpiresAt, Reason: g.Reason}}})
	}
	_, err := s.Emit(ctx, tx, out...)
	return err
}
