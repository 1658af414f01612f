package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// PruneArgs prunes expired dashboard links and browser sessions, which are
// worthless once expired but would otherwise pile up forever.
type PruneArgs struct{}

// Kind names the job in River's table.
func (PruneArgs) Kind() string { return "prune_expired_web" }

// PruneWorker runs PruneArgs.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	DB *pgxpool.Pool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Work deletes links and sessions that expired more than a day ago; the day
// of slack keeps a just-expired link explainable ("expired", not "unknown").
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	cutoff := now().Add(-24 * time.Hour)
	if _, err := w.DB.Exec(ctx, `DELETE FROM dashboard_links WHERE expires_at < $1`, cutoff); err != nil {
		return fmt.Errorf("jobs: prune dashboard links: %w", err)
	}
	if _, err := w.DB.Exec(ctx, `DELETE FROM web_sessions WHERE expires_at < $1`, cutoff); err != nil {
		return fmt.Errorf("jobs: prune sessions: %w", err)
	}
	return nil
}

// PrunePeriodic schedules PruneArgs hourly.
func PrunePeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "prune_expired_web"})
}
