package billing

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// PruneEvents deletes Stripe events received before before that are done
// with (processed or ignored). Pending and failed events stay whatever
// their age: they still have work or a person's attention coming.
func (s *Service) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, s.db, `
DELETE FROM stripe_events WHERE id IN (
  SELECT id FROM stripe_events WHERE status IN ('processed', 'ignored') AND received_at < $2 LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("billing: prune events: %w", err)
	}
	return n, nil
}
