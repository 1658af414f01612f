package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Heartbeat defaults.
const (
	// DefaultBeatEvery is how often a worker marks itself alive.
	DefaultBeatEvery = time.Second
	// DefaultDeadAfter is how long without a beat makes a worker dead
	// (WORKER_HEARTBEAT_TIMEOUT): its running jobs run again elsewhere.
	DefaultDeadAfter = 10 * time.Second
)

// HeartbeatOptions of StartHeartbeat; zero values take the defaults.
type HeartbeatOptions struct {
	// BeatEvery, default DefaultBeatEvery.
	BeatEvery time.Duration
	// DeadAfter, default DefaultDeadAfter; at least 2 beats.
	DeadAfter time.Duration
	// Rescued, when not nil, is called with the kind of every job this
	// worker freed from a dead one (a metric).
	Rescued func(kind string)
}

// Heartbeat marks one worker process (its River client id) alive in
// worker_heartbeats and frees the jobs of workers that stopped beating.
//
// River rescues a job left running by a killed worker only after
// RescueStuckJobsAfter (which it requires to be at least JobTimeout) plus up
// to 30 s of its rescuer's interval: a Stripe event whose worker died waited
// about two minutes. With heartbeats the wait is DeadAfter plus a beat. The
// beats use a connection of their own, so a pool busy with jobs never makes
// a live worker look dead (which would run its jobs twice; they are
// idempotent, as River's at-least-once delivery needs anyway).
type Heartbeat struct {
	url, id string
	log     *slog.Logger
	o       HeartbeatOptions

	stop context.CancelFunc
	done chan struct{}
	mu   sync.Mutex
	conn *pgx.Conn
}

// StartHeartbeat writes the first beat of clientID (before the River client
// starts, so that every job it takes is covered) and keeps beating, and
// rescuing the dead's jobs, until Stop.
func StartHeartbeat(ctx context.Context, databaseURL, clientID string, log *slog.Logger, o HeartbeatOptions) (*Heartbeat, error) {
	if o.BeatEvery <= 0 {
		o.BeatEvery = DefaultBeatEvery
	}
	if o.DeadAfter <= 0 {
		o.DeadAfter = DefaultDeadAfter
	}
	if o.DeadAfter < 2*o.BeatEvery {
		return nil, fmt.Errorf("jobs: heartbeat: DeadAfter %s must be at least two beats (%s)", o.DeadAfter, 2*o.BeatEvery)
	}
	h := &Heartbeat{url: databaseURL, id: clientID, log: log, o: o, done: make(chan struct{})}
	if err := h.beat(ctx); err != nil {
		h.closeConn()
		return nil, err
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	h.stop = stop
	go h.loop(loopCtx)
	return h, nil
}

// Stop ends the beats. clean says the River client stopped with no job
// left running: the row is then deleted; otherwise it is left to go stale,
// so that another worker frees what this one left running.
func (h *Heartbeat) Stop(ctx context.Context, clean bool) {
	h.stop()
	<-h.done
	if clean {
		if err := h.exec(ctx, `DELETE FROM worker_heartbeats WHERE client_id = $1`, h.id); err != nil {
			h.log.WarnContext(ctx, "worker heartbeat: delete own row", "err", err)
		}
	}
	h.closeConn()
}

func (h *Heartbeat) loop(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.o.BeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.beat(ctx); err != nil && ctx.Err() == nil {
			h.log.WarnContext(ctx, "worker heartbeat failed", "err", err)
			continue
		}
		if err := h.rescue(ctx); err != nil && ctx.Err() == nil {
			h.log.WarnContext(ctx, "worker heartbeat: rescue failed", "err", err)
		}
	}
}

func (h *Heartbeat) beat(ctx context.Context) error {
	return h.exec(ctx, `
		INSERT INTO worker_heartbeats (client_id) VALUES ($1)
		ON CONFLICT (client_id) DO UPDATE SET beat_at = now()`, h.id)
}

// rescueSQL makes the running jobs of dead workers (no beat for $1) available
// again at once, or discards one on its last attempt, recording why in the
// job's errors as River's rescuer does; the dead workers' rows go in the
// same statement. Only a job whose latest attempt is the dead worker's is
// touched, and only while it is still running: a job another worker already
// took again (or two workers rescuing at once) is left alone.
const rescueSQL = `
WITH dead AS (
    DELETE FROM worker_heartbeats WHERE beat_at < now() - $1::interval RETURNING client_id
)
UPDATE river_job j SET
    state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END::river_job_state,
    scheduled_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'at', now(), 'attempt', j.attempt, 'trace', '',
        'error', 'worker ' || d.client_id || ' stopped beating (killed?) while running this job; rescued')),
    metadata = j.metadata || jsonb_build_object('tollgate:rescued_from', d.client_id)
FROM dead d
WHERE j.state = 'running' AND j.attempted_by[array_upper(j.attempted_by, 1)] = d.client_id
RETURNING j.id, j.kind, j.state::text, d.client_id`

func (h *Heartbeat) rescue(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	conn, err := h.connLocked(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, h.o.DeadAfter/2)
	defer cancel()
	rows, err := conn.Query(ctx, rescueSQL, h.o.DeadAfter.String())
	if err != nil {
		h.dropLocked()
		return fmt.Errorf("jobs: rescue: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var kind, state, dead string
		if err := rows.Scan(&id, &kind, &state, &dead); err != nil {
			return fmt.Errorf("jobs: rescue: %w", err)
		}
		h.log.WarnContext(ctx, "job of a dead worker rescued", "job_id", id, "kind", kind, "state", state, "dead_worker", dead)
		if h.o.Rescued != nil {
			h.o.Rescued(kind)
		}
	}
	if err := rows.Err(); err != nil {
		h.dropLocked()
		return fmt.Errorf("jobs: rescue: %w", err)
	}
	return nil
}

func (h *Heartbeat) exec(ctx context.Context, sql string, args ...any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	conn, err := h.connLocked(ctx)
	if err != nil {
		return err
	}
	// A beat that takes longer than a beat is as good as missed.
	ctx, cancel := context.WithTimeout(ctx, h.o.DeadAfter/2)
	defer cancel()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		h.dropLocked() // a broken connection is replaced on the next beat
		return fmt.Errorf("jobs: heartbeat: %w", err)
	}
	return nil
}

func (h *Heartbeat) connLocked(ctx context.Context) (*pgx.Conn, error) {
	if h.conn != nil && !h.conn.IsClosed() {
		return h.conn, nil
	}
	cctx, cancel := context.WithTimeout(ctx, h.o.DeadAfter/2)
	defer cancel()
	conn, err := pgx.Connect(cctx, h.url)
	if err != nil {
		return nil, fmt.Errorf("jobs: heartbeat: connect: %w", err)
	}
	h.conn = conn
	return conn, nil
}

func (h *Heartbeat) dropLocked() {
	if h.conn != nil {
		_ = h.conn.Close(context.Background())
		h.conn = nil
	}
}

func (h *Heartbeat) closeConn() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked()
}
