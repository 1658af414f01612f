package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/cmd/internal/wire"
	"github.com/tollgatehq/tollgate/internal/buildinfo"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/idempotency"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/logging"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/internal/tracing"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/web/expired"
)

const usage = `usage: worker [version]

Runs Tollgate's durable jobs (Stripe events, metering flushes, period closing,
Stripe meter reporting, resync) and periodic jobs until SIGINT or SIGTERM.
Several workers may run at once; River elects one leader for periodic jobs.
"worker version" prints the build (version, VCS revision, Go version).
`

const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

// run is main without the process: tests call it and cancel ctx to stop it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		if args[0] == "version" || args[0] == "--version" {
			fmt.Fprintln(stdout, "worker", buildinfo.Read())
			return exitOK
		}
		fmt.Fprintf(stderr, "worker: unexpected argument %q\n%s", args[0], usage)
		return exitConfig
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitConfig
	}
	log := logging.New(stderr, cfg.LogLevel)
	stopTracing, err := tracing.Setup(ctx, "tollgate-worker", "", getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitConfig
	}
	err = work(ctx, cfg, log, nil)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if terr := stopTracing(fctx); terr != nil {
		log.Warn("traces not flushed", "err", terr)
	}
	if err != nil {
		log.Error("worker failed", "err", err)
		return exitFailed
	}
	return exitOK
}

// work runs the River client until ctx ends, then stops it softly: running
// jobs finish (or are rescued later), nothing new is fetched.
func work(ctx context.Context, cfg config.Config, log *slog.Logger, started func()) error {
	if cfg.MigrateOnStart {
		if err := postgres.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
		if err := postgres.Migrate(ctx, cfg.DatabaseURL, log); err != nil {
			return err
		}
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.DatabaseMaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb, err := cfg.NewRedis()
	if err != nil {
		return err
	}
	defer rdb.Close()

	workers := river.NewWorkers()
	river.AddWorker(workers, &jobs.PruneWorker{}) // jobs queued before retention took its place
	var periodic []*river.PeriodicJob
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	// One entitlements service for every job that changes what a tenant may
	// do; its snapshots go to Redis under the limiter's prefix, as the api's do.
	// Webhooks: the delivery jobs; the events of entitlements changes and
	// of the flush's quota thresholds, each written in its transaction.
	hooks, err := wire.Notify(pool, cfg, log)
	if err != nil {
		return err
	}
	hooks.Register(workers)
	if n, err := hooks.SealStored(ctx); err != nil {
		log.Error("sealing webhook secrets stored in clear failed", "err", err)
	} else if n > 0 {
		log.Info("webhook secrets sealed at rest", "endpoints", n)
	}
	ents := entitlements.NewService(pool, limitstore.New(rdb, keyspace.DefaultPrefix), log, entitlements.Options{
		DefaultPlan: cfg.DefaultPlan, GracePeriod: cfg.GracePeriod,
		OnChange: hooks.EntitlementsChanged,
	})
	// Live tenants' snapshots never expire from Redis (a backend without a
	// loader would see them as unknown tenants).
	river.AddWorker(workers, &entitlements.RepublishWorker{Service: ents})
	periodic = append(periodic, entitlements.RepublishPeriodic())
	cat := wire.Catalogue(pool, ents, log)
	bill, err := wire.Billing(pool, ents, cat, cfg, log, reg, limitstore.New(rdb, keyspace.DefaultPrefix))
	if err != nil {
		return err
	}
	bill.Workers(workers)
	periodic = append(periodic, bill.Periodic()...)
	jm, err := newJobMetrics(reg, pool, log)
	if err != nil {
		return err
	}
	// Grants: expiries written every 10 s; rollover at each period close;
	// the grant.* webhooks from the draws the flush records and expiries.
	// The sweep of the expiry job writes new and changed grants to Redis.
	creds := wire.Credits(pool, ents, cat, log, credits.Options{Events: hooks.GrantEvents, Grants: limitstore.New(rdb, keyspace.DefaultPrefix)})
	periodic = append(periodic, creds.Register(workers)...)
	meter := newMetering(pool, rdb, ents, cfg, log, jm, hooks, creds)
	periodic = append(periodic, meter.Register(workers)...)
	river.AddWorker(workers, &jobs.RetentionWorker{Log: log, Rules: retention(cfg, ents, bill, meter, idempotency.New(pool), expired.New(pool))})
	periodic = append(periodic, jobs.RetentionPeriodic())

	client, err := jobs.NewWorkerClient(pool, log, jobs.Config{Workers: workers, Periodic: periodic})
	if err != nil {
		return err
	}
	// Beats before River takes a job, so that every job it runs is freed
	// within WORKER_HEARTBEAT_TIMEOUT if this process dies.
	hb, err := jobs.StartHeartbeat(ctx, cfg.DatabaseURL, client.ID(), log, jobs.HeartbeatOptions{
		DeadAfter: cfg.WorkerHeartbeatTimeout, Rescued: jm.rescued})
	if err != nil {
		return err
	}
	clean := false
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		hb.Stop(stopCtx, clean)
	}()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("worker: start river: %w", err)
	}
	// The flush loop stops with ctx; its last pass must end before rdb and
	// pool close (deferred above).
	meter.Start(ctx)
	defer meter.Wait()
	if cfg.WorkerMetricsAddr != "" {
		go serveMetrics(ctx, cfg.WorkerMetricsAddr, reg, cfg.MetricsToken, log)
	}
	log.Info("worker started")
	if started != nil {
		started()
	}
	<-ctx.Done()
	// A signal: say so, so that the wait for running jobs is not silence.
	log.Info("worker draining", "timeout", cfg.ShutdownTimeout.String())
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("worker: stop river: %w", err)
	}
	clean = true // no job left running: nothing for the others to rescue
	log.Info("worker stopped")
	return nil
}
