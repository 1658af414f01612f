package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/notify"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// meteringPart is the worker's metering: the flush loop (every worker runs
// one; claims make that safe) and the River jobs that close periods, expire
// overrides and, with Stripe configured, report usage to Stripe meters.
type meteringPart struct {
	svc  *metering.Service
	ents *entitlements.Service
	rdb  redis.UniversalClient
	cfg  config.Config
	jm   *jobMetrics
	wg   sync.WaitGroup
}

func newMetering(pool *pgxpool.Pool, rdb redis.UniversalClient, ents *entitlements.Service, cfg config.Config, log *slog.Logger, jm *jobMetrics, hooks *notify.Service, creds *credits.Service) *meteringPart {
	store := limitstore.New(rdb, keyspace.DefaultPrefix)
	// The snapshot (computed from Postgres) gives the Stripe report each
	// tenant's included quota, overrides and all, for overage billing.
	// The flush's quota crossings, the refusals flush's exhausted quotas and
	// the closed windows go to the webhooks' outbox in their own transactions;
	// the closed windows also to credits' rollover, in the same one.
	svc := metering.NewService(pool, store, log, metering.Options{OnFlush: jm.onFlush, Snapshot: ents.SnapshotFromPostgres,
		Crossings: hooks.QuotaCrossings, Exhausted: hooks.QuotaExhaustions, PeriodsClosed: periodsClosed(hooks.PeriodsClosed, rollover(creds)),
		// Units prepaid grants covered are taken off the overage reported.
		Limits: ents.CachedSnapshot, GrantDraws: grantDraws(creds), Prepaid: creds.PrepaidConsumed})
	return &meteringPart{svc: svc, ents: ents, rdb: rdb, cfg: cfg, jm: jm}
}

// Register adds the metering workers and periodic jobs.
func (m *meteringPart) Register(workers *river.Workers) []*river.PeriodicJob {
	river.AddWorker(workers, &closePeriodsWorker{svc: m.svc, m: m.jm})
	river.AddWorker(workers, &metering.ExpireOverridesWorker{Refresh: m.ents.RefreshExpiredOverrides})
	periodic := []*river.PeriodicJob{metering.ClosePeriodsPeriodic(), metering.ExpireOverridesPeriodic()}
	if m.cfg.StripeSecretKey != "" {
		// Usage of quotas with a stripe_meter_event goes to Stripe Billing Meters.
		sender := metering.NewStripeMeterSender(m.cfg.StripeSecretKey, m.cfg.StripeAPIBase)
		river.AddWorker(workers, &metering.StripeReportWorker{Service: m.svc, Sender: sender})
		periodic = append(periodic, metering.StripeReportPeriodic())
	}
	return periodic
}

// Start runs the flush loop until ctx ends; Wait waits for its last pass.
func (m *meteringPart) Start(ctx context.Context) {
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.svc.RunFlusher(ctx, m.cfg.FlushInterval, m.rdb) }()
}

// Wait returns once the flush loop has stopped.
func (m *meteringPart) Wait() { m.wg.Wait() }

// rollover hands the windows the close job closed to credits, in the
// close's transaction: unused included units of quotas with a rollover
// become grants, once per window.
func rollover(creds *credits.Service) metering.PeriodsClosedFunc {
	return func(ctx context.Context, tx pgx.Tx, ws []metering.ClosedWindow) error {
		var in []credits.ClosedPeriod
		for _, w := range ws {
			for m, used := range w.Meters {
				in = append(in, credits.ClosedPeriod{TenantID: w.Tenant, Meter: m, Start: w.WindowStart, End: w.WindowEnd, Used: used})
			}
		}
		_, err := creds.RolloverTx(ctx, tx, in)
		return err
	}
}

// grantDraws hands the grants' draws of flushed claims to credits' ledger,
// in the flush's transaction, under each claim's id.
func grantDraws(creds *credits.Service) metering.GrantDrawsFunc {
	return func(ctx context.Context, tx pgx.Tx, ds []metering.GrantDraw) error {
		in := make([]credits.Draw, len(ds))
		for i, d := range ds {
			in[i] = credits.Draw{FlushID: d.FlushID, GrantID: d.GrantID, PeriodStart: d.PeriodStart, Units: d.Units}
		}
		_, err := creds.RecordDrawsTx(ctx, tx, in)
		return err
	}
}

// periodsClosed runs each hook in turn in the close's transaction.
func periodsClosed(hooks ...metering.PeriodsClosedFunc) metering.PeriodsClosedFunc {
	return func(ctx context.Context, tx pgx.Tx, ws []metering.ClosedWindow) error {
		for _, h := range hooks {
			if err := h(ctx, tx, ws); err != nil {
				return err
			}
		}
		return nil
	}
}
