// Package jobs builds River clients: the worker's, which works every job the
// domains register, and the api's insert-only one, which enqueues jobs inside
// the caller's transaction (the webhook's store-then-enqueue).
package jobs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tollgatehq/tollgate/internal/logging"
	"github.com/tollgatehq/tollgate/internal/tracing"
)

// Queues of the worker. Stripe events get their own queue so a backlog of
// metering work never delays a plan change.
const (
	QueueDefault = river.QueueDefault
	QueueStripe  = "stripe"
)

// Config of the worker's client. Zero values take the defaults noted.
type Config struct {
	// Workers registered by the domains. Required.
	Workers *river.Workers
	// Periodic jobs; River's leader election runs each on one worker only.
	Periodic []*river.PeriodicJob
	// MaxWorkers per queue; default 10.
	MaxWorkers int
	// FetchPoll is how often River polls for new jobs when LISTEN/NOTIFY
	// says nothing; default 100ms so webhook effects land well within a second.
	FetchPoll time.Duration
}

// NewWorkerClient returns a client that works jobs once started.
func NewWorkerClient(pool *pgxpool.Pool, log *slog.Logger, c Config) (*river.Client[pgx.Tx], error) {
	if c.MaxWorkers == 0 {
		c.MaxWorkers = 10
	}
	if c.FetchPoll == 0 {
		c.FetchPoll = 100 * time.Millisecond
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		// River's routine (job counts every few seconds) is DEBUG here:
		// at INFO it was most of a worker's log.
		Logger: logging.Demote(log),
		Queues: map[string]river.QueueConfig{
			QueueDefault: {MaxWorkers: c.MaxWorkers},
			QueueStripe:  {MaxWorkers: c.MaxWorkers},
		},
		Workers: c.Workers,
		// A span per job, linked to the span that enqueued it, while tracing is on.
		Middleware:        tracing.RiverMiddleware(),
		PeriodicJobs:      c.Periodic,
		FetchPollInterval: c.FetchPoll,
		FetchCooldown:     c.FetchPoll / 2,
		// A worker killed mid-job leaves the job running in the table. The
		// workers' heartbeats (heartbeat.go) free it within seconds; River's
		// own rescue after this long stays as the fallback (a worker that
		// never beat). River refuses a rescue delay shorter than JobTimeout
		// (the client would not start), so it is JobTimeout plus a margin.
		RescueStuckJobsAfter: 2 * time.Minute,
		JobTimeout:           time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: river client: %w", err)
	}
	return client, nil
}

// NewInsertClient returns a client that only enqueues (used by api).
func NewInsertClient(pool *pgxpool.Pool, log *slog.Logger) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logging.Demote(log), Middleware: tracing.RiverMiddleware()})
	if err != nil {
		return nil, fmt.Errorf("jobs: river insert client: %w", err)
	}
	return client, nil
}
