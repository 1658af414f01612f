package credits

import (
	"context"
	"sync"
	"time"

	"github.com/riverqueue/river"
)

// ExpireGrantsArgs writes the expiry of every grant whose expires_at has
// passed. Until it runs, answers already show such a grant expired, and
// the ledger books the expiry itself before it records a draw.
type ExpireGrantsArgs struct{}

// Kind names the job in River's table.
func (ExpireGrantsArgs) Kind() string { return "credits_expire_grants" }

// ExpireGrantsWorker runs ExpireGrantsArgs.
type ExpireGrantsWorker struct {
	river.WorkerDefaults[ExpireGrantsArgs]
	Service *Service

	mu        sync.Mutex
	published time.Time // the last sweep's start (zero: none yet, all are written)
}

// publishOverlap is how far a sweep looks back before the last one: a
// grant's created_at is its transaction's start, which commits later.
const publishOverlap = 5 * time.Second

// Work expires, writes the grants that changed since the last run to Redis
// (PublishChanged: top-ups and rollovers made in others' transactions reach
// the limiter within a run), then prunes flush records too old to be
// replayed.
func (w *ExpireGrantsWorker) Work(ctx context.Context, _ *river.Job[ExpireGrantsArgs]) error {
	if _, err := w.Service.ExpireDue(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	since := w.published
	w.mu.Unlock()
	start := w.Service.now()
	if !since.IsZero() {
		since = since.Add(-publishOverlap)
	}
	if _, err := w.Service.PublishChanged(ctx, since); err != nil {
		return err
	}
	w.mu.Lock()
	w.published = start
	w.mu.Unlock()
	_, err := w.Service.PruneFlushRecords(ctx)
	return err
}

// Register adds the credits workers to workers and returns their periodic
// jobs (the worker process).
func (s *Service) Register(workers *river.Workers) []*river.PeriodicJob {
	river.AddWorker(workers, &ExpireGrantsWorker{Service: s})
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(10*time.Second),
		func() (river.JobArgs, *river.InsertOpts) { return ExpireGrantsArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "credits_expire_grants"})}
}
