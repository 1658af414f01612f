package credits

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// What Options.Events is told (the grant.* webhooks, issue 27).
const (
	// EventLow: a draw took the grant's remaining under LowPercent of its
	// amount.
	EventLow = "low"
	// EventDepleted: a draw took the last of it.
	EventDepleted = "depleted"
	// EventExpired: its expiry was written with units left.
	EventExpired = "expired"
)

// DefaultLowPercent is Options.LowPercent's default.
const DefaultLowPercent = 20

// GrantEvent is one change of a grant worth announcing, found in the
// transaction that made it: a flush's draws (low, depleted) or an expiry.
// Each happens once per grant: its units only ever go down, but for a
// refund, and a grant closes once.
type GrantEvent struct {
	Kind  string
	Grant Grant // as the transaction leaves it
	// Units: what expired (EventExpired); else what the draw took.
	Units int64
}

// EventsFunc takes grant events in the transaction of the change, so that
// they are written (to an outbox) exactly when the change commits.
type EventsFunc func(ctx context.Context, tx pgx.Tx, evs []GrantEvent) error

// drawEvents are the events of one draw that moved a grant's remaining
// from before to after (an open grant's; a closed one's remaining is 0).
func drawEvents(lowPercent int, amount, before, after int64) []string {
	if after >= before {
		return nil
	}
	var kinds []string
	under := func(r int64) bool { return r*100 < amount*int64(lowPercent) }
	if !under(before) && under(after) {
		kinds = append(kinds, EventLow)
	}
	if before > 0 && after == 0 {
		kinds = append(kinds, EventDepleted)
	}
	return kinds
}

// announce hands evs to Options.Events with each grant read as tx leaves
// it; pending holds grant ids with their kinds and units, in order.
func (s *Service) announce(ctx context.Context, tx pgx.Tx, pending []pendingEvent) error {
	if s.opts.Events == nil || len(pending) == 0 {
		return nil
	}
	evs := make([]GrantEvent, 0, len(pending))
	for _, p := range pending {
		g, err := s.get(ctx, tx, p.grantID, false)
		if err != nil {
			return fmt.Errorf("credits: grant event: %w", err)
		}
		evs = append(evs, GrantEvent{Kind: p.kind, Grant: g, Units: p.units})
	}
	if err := s.opts.Events(ctx, tx, evs); err != nil {
		return fmt.Errorf("credits: grant events: %w", err)
	}
	return nil
}

type pendingEvent struct {
	grantID, kind string
	units         int64
}
