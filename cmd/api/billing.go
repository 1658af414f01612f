package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/jobs"
)

// newBilling builds the api's billing service: the webhook intake (which
// enqueues with an insert-only River client in the same transaction as it
// stores), the admin's Stripe views, and plan changes through Stripe.
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

// planChanger is billing (plan changes through Stripe) when STRIPE_SECRET_KEY
// is set, else the local change of entitlements.
func planChanger(cfg config.Config, ents *entitlements.Service, bill *billing.Service) httpapi.PlanChanger {
	if cfg.StripeSecretKey != "" && bill != nil {
		return bill
	}
	return ents
}
