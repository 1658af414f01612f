package jobs

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// runningJob inserts a job that River would show as running, attempted
// last by the given client ids, and returns its id.
func runningJob(t *testing.T, db *pgxpool.Pool, kind string, attempt, maxAttempts int, attemptedBy ...string) int64 {
	t.Helper()
	var id int64
	if err := db.QueryRow(t.Context(), `
		INSERT INTO river_job (kind, args, state, attempt, max_attempts, attempted_at, attempted_by, queue, priority, scheduled_at)
		VALUES ($1, '{}', 'running', $2, $3, now(), $4, 'default', 1, now()) RETURNING id`,
		kind, attempt, maxAttempts, attemptedBy).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// The heartbeat frees exactly the running jobs whose latest attempt is a
// dead worker's (a stale beat): available again at once, or discarded on
// their last attempt, each with an error saying why; jobs of live workers,
// jobs another worker already took again, and jobs of a worker that never
// beat (River's own rescue covers those) are left alone; the dead worker's
// row goes.
func TestHeartbeatRescuesOnlyTheDeadWorkersRunningJobs(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	tag := strings.ToLower(t.Name())
	dead, live, never := tag+"-dead", tag+"-live", tag+"-never"
	if _, err := db.Exec(ctx, `INSERT INTO worker_heartbeats (client_id, beat_at) VALUES ($1, now() - interval '1 hour'), ($2, now())`, dead, live); err != nil {
		t.Fatal(err)
	}
	retry := runningJob(t, db, "hb_retry", 1, 5, dead)
	last := runningJob(t, db, "hb_last", 5, 5, dead)
	retaken := runningJob(t, db, "hb_retaken", 2, 5, dead, live)
	liveJob := runningJob(t, db, "hb_live", 1, 5, live)
	neverJob := runningJob(t, db, "hb_never", 1, 5, never)

	var mu sync.Mutex
	var kinds []string
	self := tag + "-self"
	hb, err := StartHeartbeat(ctx, pgtest.URL(t), self, slog.New(slog.DiscardHandler), HeartbeatOptions{
		BeatEvery: 50 * time.Millisecond, DeadAfter: 2 * time.Second,
		Rescued: func(kind string) { mu.Lock(); kinds = append(kinds, kind); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	state := func(id int64) (st string, finalized bool, errs string) {
		if err := db.QueryRow(ctx, `SELECT state::text, finalized_at IS NOT NULL, coalesce(array_to_string(errors, ' '), '') FROM river_job WHERE id = $1`, id).
			Scan(&st, &finalized, &errs); err != nil {
			t.Fatal(err)
		}
		return
	}
	testkit.Eventually(t, 10*time.Second, "the dead worker's jobs rescued", func() bool {
		a, _, _ := state(retry)
		b, _, _ := state(last)
		return a != "running" && b != "running"
	})
	if st, fin, errs := state(retry); st != "available" || fin || !strings.Contains(errs, dead+" stopped beating") {
		t.Errorf("dead worker's job with attempts left: %s finalized=%v errors %q, want available with the reason", st, fin, errs)
	}
	if st, fin, _ := state(last); st != "discarded" || !fin {
		t.Errorf("dead worker's job on its last attempt: %s finalized=%v, want discarded", st, fin)
	}
	// A few more beats: nothing else moves.
	var beats int
	testkit.Eventually(t, 10*time.Second, "more beats", func() bool {
		var at time.Time
		_ = db.QueryRow(ctx, `SELECT beat_at FROM worker_heartbeats WHERE client_id = $1`, self).Scan(&at)
		beats++
		return beats > 5 && time.Since(at) < time.Second
	})
	for name, id := range map[string]int64{"taken again by a live worker": retaken, "a live worker's": liveJob, "a worker that never beat": neverJob} {
		if st, _, errs := state(id); st != "running" || errs != "" {
			t.Errorf("job %s: %s %q, want left running", name, st, errs)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM worker_heartbeats WHERE client_id = $1`, dead).Scan(&n); err != nil || n != 0 {
		t.Errorf("dead worker's heartbeat rows: %d (%v), want 0", n, err)
	}
	mu.Lock()
	if len(kinds) != 2 {
		t.Errorf("Rescued hook called for %v, want hb_retry and hb_last", kinds)
	}
	mu.Unlock()

	// A clean stop deletes the row; an unclean one leaves it to go stale.
	hb.Stop(context.Background(), true)
	if err := db.QueryRow(ctx, `SELECT count(*) FROM worker_heartbeats WHERE client_id = $1`, self).Scan(&n); err != nil || n != 0 {
		t.Errorf("after a clean stop: %d rows (%v), want 0", n, err)
	}
	hb2, err := StartHeartbeat(ctx, pgtest.URL(t), self+"-2", slog.New(slog.DiscardHandler), HeartbeatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hb2.Stop(context.Background(), false)
	if err := db.QueryRow(ctx, `SELECT count(*) FROM worker_heartbeats WHERE client_id = $1`, self+"-2").Scan(&n); err != nil || n != 1 {
		t.Errorf("after an unclean stop: %d rows (%v), want 1", n, err)
	}
	if _, err := StartHeartbeat(ctx, pgtest.URL(t), "x", slog.New(slog.DiscardHandler), HeartbeatOptions{BeatEvery: time.Second, DeadAfter: time.Second}); err == nil {
		t.Error("DeadAfter of one beat accepted")
	}
}
