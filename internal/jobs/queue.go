package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// QueueDepth is the count of unfinished River jobs of one queue, kind and
// state.
type QueueDepth struct {
	Queue, Kind, State string
	Jobs               int64
}

// ReadQueueDepth counts the jobs not finished (available, scheduled,
// retryable, running) by queue, kind and state. River's tables are read
// here, beside the heartbeat that already writes them, so that no other
// package depends on River's schema.
func ReadQueueDepth(ctx context.Context, q postgres.Querier) ([]QueueDepth, error) {
	rows, err := q.Query(ctx, `
		SELECT queue, kind, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'running') GROUP BY 1, 2, 3`)
	if err != nil {
		return nil, fmt.Errorf("jobs: queue depth: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[QueueDepth])
	if err != nil {
		return nil, fmt.Errorf("jobs: queue depth: %w", err)
	}
	return out, nil
}
