package jobs

import (
	"context"

	"github.com/riverqueue/river"
)

// PruneArgs was the hourly prune of expired dashboard links and sessions,
// which web's own functions now do as retention rules (cmd/worker's
// retention). The kind stays registered, doing nothing, so that a job of it
// queued before an upgrade completes instead of failing as an unknown kind
// and being retried for weeks; remove it in the release after.
type PruneArgs struct{}

// Kind names the job in River's table.
func (PruneArgs) Kind() string { return "prune_expired_web" }

// PruneWorker completes PruneArgs jobs left from before the upgrade.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
}

// Work does nothing: the retention job prunes web's tables.
func (w *PruneWorker) Work(context.Context, *river.Job[PruneArgs]) error { return nil }
