package main

import (
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/idempotency"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/web/expired"
)

// retention is the worker's retention rules: each table pruned by its
// owner, kept as long as the configuration says (docs/configuration.md).
func retention(cfg config.Config, ents *entitlements.Service, bill *billing.Service, meter *meteringPart, idem *idempotency.Store, pruner expired.Pruner) []jobs.Retention {
	return []jobs.Retention{
		{Name: "usage_events", Keep: cfg.UsageEventsRetention, Prune: meter.svc.PruneUsageEvents},
		{Name: "stripe_events", Keep: cfg.StripeEventsRetention, Prune: bill.PruneEvents},
		{Name: "entitlement_versions", Keep: cfg.EntitlementVersionsRetention, Prune: ents.PruneVersions},
		{Name: "quota_overrides (expired)", Keep: cfg.ExpiredOverridesRetention, Prune: ents.PruneExpiredOverrides},
		{Name: "idempotency_keys", Keep: idempotency.TTL, Prune: idem.Prune},
		// Expired links and sessions go a day after they expired: a link
		// just expired still explains itself ("expired", not "unknown").
		{Name: "dashboard_links (expired)", Keep: 24 * time.Hour, Prune: pruner.PruneLinks},
		{Name: "web_sessions (expired)", Keep: 24 * time.Hour, Prune: pruner.PruneSessions},
	}
}
