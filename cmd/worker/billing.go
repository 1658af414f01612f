package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/limiter"
)

// newBilling builds the billing service whose workers apply Stripe events,
// expire grace periods and resync with Stripe. Its snapshots go to Redis
// under the limiter's prefix, as the api's do; it inserts follow-up jobs
// (re-runs, replays) with an insert-only client of its own.
func newBilling(pool *pgxpool.Pool, rdb redis.UniversalClient, cfg config.Config, log *slog.Logger, reg prometheus.Registerer) (*billing.Service, error) {
	ents := entitlements.NewService(pool, limiter.NewStore(rdb, limiter.DefaultPrefix), log, entitlements.Options{
		DefaultPlan: cfg.DefaultPlan, GracePeriod: cfg.GracePeriod, Prefix: limiter.DefaultPrefix,
	})
	ins, err := jobs.NewInsertClient(pool, log)
	if err != nil {
		return nil, err
	}
	return billing.New(pool, ents, ins, log, billing.Options{
		WebhookSecret:         cfg.StripeWebhookSecret,
		WebhookSecretPrevious: cfg.StripeWebhookSecretPrevious,
		SecretKey:             cfg.StripeSecretKey,
		APIBase:               cfg.StripeAPIBase,
		GracePeriod:           cfg.GracePeriod,
		Registerer:            reg,
	})
}
