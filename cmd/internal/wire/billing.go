// Package wire builds what both commands (api and worker) build the same
// way, so that a new option reaches both.
package wire

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/jobs"
)

// Catalogue builds the product catalogue on the process's entitlements
// service: a plan edit or an add-on change bumps the tenants it reaches in
// its own transaction (entitlements.Service.TouchCatalogue) and publishes
// them after the commit.
func Catalogue(pool *pgxpool.Pool, ents *entitlements.Service, log *slog.Logger) *catalogue.Service {
	return catalogue.NewService(pool, log, catalogue.Options{Touch: ents.TouchCatalogue})
}

// Billing builds the billing service on the process's one entitlements
// service and catalogue. In the api it is the webhook intake (which enqueues with the
// insert-only River client in the same transaction as it stores), the
// admin's Stripe views and plan changes through Stripe; in the worker its
// workers apply events, expire grace periods and resync, inserting follow-up
// jobs with the same kind of client. grants (limitstore's Store; nil:
// none) writes the grants a Stripe credit grant event made or voided to
// Redis right after the event commits, so that a void stops draws within
// a second.
func Billing(pool *pgxpool.Pool, ents *entitlements.Service, cat *catalogue.Service, cfg config.Config, log *slog.Logger, reg prometheus.Registerer, grants credits.GrantWriter) (*billing.Service, error) {
	ins, err := jobs.NewInsertClient(pool, log)
	if err != nil {
		return nil, err
	}
	return billing.New(pool, ents, cat, ins, log, billing.Options{
		// Top-ups bought through Stripe become grants (credits stores them;
		// they reach Redis by the worker's sweep, within 10 s); Stripe
		// credit grants are mirrored as grants, written to Redis at once.
		Credits:               Credits(pool, ents, cat, log, credits.Options{Grants: grants}),
		WebhookSecret:         cfg.StripeWebhookSecret,
		WebhookSecretPrevious: cfg.StripeWebhookSecretPrevious,
		SecretKey:             cfg.StripeSecretKey,
		APIBase:               cfg.StripeAPIBase,
		Proration:             cfg.StripeProration,
		GracePeriod:           cfg.GracePeriod,
		Registerer:            reg,
	})
}

// Credits builds the credits service (grants, top-ups) on the process's
// entitlements service and catalogue; opts.Events is set where grant changes are
// announced (the worker, whose flush and expiry job make them).
func Credits(pool *pgxpool.Pool, ents *entitlements.Service, cat *catalogue.Service, log *slog.Logger, opts credits.Options) *credits.Service {
	return credits.NewService(pool, ents, cat, log, opts)
}

// Audit is the trail of admin actions of the API and the console, reading
// each subject it records through its owner: tenants through entitlements,
// plans and add-ons through the catalogue, API keys and service tokens through credentials,
// Stripe events through billing, grants and top-ups through credits.
func Audit(pool *pgxpool.Pool, log *slog.Logger, ents *entitlements.Service, cat *catalogue.Service, keys *credentials.Service, bill *billing.Service, creds *credits.Service) *audit.Log {
	trail := audit.New(pool, log)
	readers.Register(trail, ents, cat, keys, bill, creds)
	return trail
}
