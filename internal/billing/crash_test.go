package billing_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// The real worker binary, SIGKILLed while it is inside an event's
// processing transaction: nothing of the event is applied; River's rescuer
// (run by the next worker once the dead one's leadership lapses) puts the job
// back and it is applied once.
func TestWorkerProcessKilledMidEventIsRescuedAndAppliedOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and kills the worker binary, then waits for River's leadership to lapse (~20s)")
	}
	e := newEnv(t, envOpts{noWorker: true})
	e.plans()
	cus, sub := newCustomer(), "sub_crash_"+newCustomer()
	tenant := e.tenant("free", cus)
	v0 := e.version(tenant)
	ctx := context.Background()

	bin := testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")

	// Hold the customer's lock so that the worker stops inside the event's
	// transaction, where a crash must leave nothing behind.
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	lockKey := "tollgate.stripe_customer:" + cus
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, lockKey); err != nil {
		t.Fatal(err)
	}
	id := newEventID(t)
	if r := e.post(subEvent(t, "customer.subscription.created", id, cus, sub, "active", "price_pro_test", time.Now())); r.Status != 200 {
		t.Fatalf("post: %d", r.Status)
	}

	var logs bytes.Buffer
	w := exec.Command(bin)
	w.Env = append(os.Environ(), "DATABASE_URL="+e.dbURL, "REDIS_URL="+redistest.URL(), "MIGRATE_ON_START=false",
		"STRIPE_WEBHOOK_SECRET="+secret, "LOG_LEVEL=warn")
	w.Stdout, w.Stderr = &logs, &logs
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = w.Process.Kill()
			_ = w.Wait()
		}
	}()
	// Wait until the worker's backend waits for the customer's lock.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting bool
		err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND pid <> $1)`,
			conn.Conn().PgConn().PID()).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never reached the event's transaction; its log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	killed = true
	// Its orphaned backends go with it (as they do once Postgres notices).
	if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> $1 AND wait_event = 'advisory'`, conn.Conn().PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lockKey); err != nil {
		t.Fatal(err)
	}
	if r := e.event(id); r.Status != billing.StatusPending || e.version(tenant) != v0 {
		t.Fatalf("after the crash: %+v version %d, want pending and %d", r, e.version(tenant), v0)
	}
	var state string
	_ = e.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE args->>'event_id' = $1`, id).Scan(&state)
	if state != "running" {
		t.Fatalf("job state %q after the crash, want running (stuck until rescued)", state)
	}

	// The next worker: the same workers, rescuing stuck jobs after 1s
	// (production: 2m) so that the test does not wait minutes.
	workers := river.NewWorkers()
	e.svc.Workers(workers)
	rescuing, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{
		Queues:               map[string]river.QueueConfig{jobs.QueueDefault: {MaxWorkers: 5}, jobs.QueueStripe: {MaxWorkers: 5}},
		Workers:              workers,
		FetchPollInterval:    50 * time.Millisecond,
		FetchCooldown:        25 * time.Millisecond,
		RescueStuckJobsAfter: time.Second,
		JobTimeout:           time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rescuing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = rescuing.Stop(sctx)
	}()
	deadline = time.Now().Add(60 * time.Second)
	for e.event(id).Status == billing.StatusPending {
		if time.Now().After(deadline) {
			t.Fatalf("not applied a minute after the restart: %+v", e.event(id))
		}
		time.Sleep(50 * time.Millisecond)
	}
	var versions int
	_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM entitlement_versions WHERE tenant_id = $1 AND reason LIKE '%' || $2`, tenant, id).Scan(&versions)
	if r := e.event(id); r.Status != billing.StatusProcessed || e.version(tenant) != v0+1 || versions != 1 || e.tenantPlan(tenant) != "pro" {
		t.Fatalf("after the restart: %+v version %d (want %d), %d versions name the event, plan %s", r, e.version(tenant), v0+1, versions, e.tenantPlan(tenant))
	}
}
