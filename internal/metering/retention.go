package metering

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// PruneUsageEvents deletes usage events received before before. Their
// quantities stay in usage_periods and usage_hourly; only the per-event
// rows (the idempotency record) go.
func (s *Service) PruneUsageEvents(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, s.db, `
DELETE FROM usage_events WHERE ctid IN (
  SELECT ctid FROM usage_events WHERE received_at < $2 LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("metering: prune usage events: %w", err)
	}
	return n, nil
}
