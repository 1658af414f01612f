package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/jobs"
)

// newBilling builds the billing service whose workers apply Stripe events,
// expire grace periods and resync with Stripe, on the worker's one
// entitlements service; it inserts follow-up jobs (re-runs, replays) with an
// insert-only client of its own.
func newBilling(pool *pgxpool.Pool, ents *entitlements.Service, cfg config.Config, log *slog.Logger, reg prometheus.Registerer) (*billing.Service, error) {
	ins, err := jobs.NewInsertClient(pool, log)
	if err != nil {
		return nil, err
	}
	return billing.New(pool, ents, ins, log, billing.Options{
		WebhookSecret:         cfg.StripeWebhookSecret,
		WebhookSecretPrevious: cfg.StripeWebhookSecretPrevious,
		SecretKey:             cfg.StripeSecretKey,
		APIBase:               cfg.StripeAPIBase,
		Proration:             cfg.StripeProration,
		GracePeriod:           cfg.GracePeriod,
		Registerer:            reg,
	})
}
