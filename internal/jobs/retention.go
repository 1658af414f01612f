package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// Retention is one table's rule: rows older than Keep go, pruned by the
// table's owner (Prune deletes what is older than before and says how many
// rows went).
type Retention struct {
	Name  string
	Keep  time.Duration
	Prune func(ctx context.Context, before time.Time) (int64, error)
}

// RetentionArgs runs every retention rule once.
type RetentionArgs struct{}

// Kind names the job in River's table.
func (RetentionArgs) Kind() string { return "retention" }

// RetentionWorker runs RetentionArgs over Rules (cmd/worker wires them from
// the owners of usage_events, stripe_events, entitlement_versions and
// quota_overrides, with the keep times of its configuration).
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	Rules []Retention
	Log   *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Work runs every rule, even when one fails (one table's trouble must not
// let the others grow), and returns the failures joined so River retries.
func (w *RetentionWorker) Work(ctx context.Context, _ *river.Job[RetentionArgs]) error {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	log := w.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var errs []error
	for _, r := range w.Rules {
		n, err := r.Prune(ctx, now().Add(-r.Keep))
		if err != nil {
			errs = append(errs, fmt.Errorf("jobs: retention of %s: %w", r.Name, err))
			continue
		}
		if n > 0 {
			log.InfoContext(ctx, "retention pruned rows", "table", r.Name, "rows", n, "keep", r.Keep.String())
		}
	}
	return errors.Join(errs...)
}

// RetentionPeriodic schedules RetentionArgs hourly: retention is counted in
// days, so an hour late is nothing, and each pass finds little to do.
func RetentionPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return RetentionArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "retention"})
}
