package web

import (
	"context"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// The pages show tables the web does not own; they read them through their
// owners (issue 24), declared here as what the pages ask. cmd/api passes
// the services themselves.

// EntitlementsReader is what the pages read of tenants, overrides,
// versions and subscriptions (*entitlements.Service).
type EntitlementsReader interface {
	TenantSummary(ctx context.Context, id string) (entitlements.TenantSummary, error)
	SearchTenants(ctx context.Context, q string, page, size int) ([]entitlements.TenantSummary, int64, error)
	TenantNames(ctx context.Context, tenantIDs []string, limit int) ([]entitlements.TenantName, error)
	TenantByCustomer(ctx context.Context, stripeCustomerID string) (entitlements.Tenant, error)
	TenantByExternalID(ctx context.Context, externalID string) (entitlements.Tenant, error)
	PlanTenantCounts(ctx context.Context) (map[string]int64, error)
	ListOverrides(ctx context.Context, tenantID string) ([]entitlements.Override, error)
	ListVersions(ctx context.Context, tenantID string, limit int) ([]entitlements.Version, error)
	CurrentSubscription(ctx context.Context, tenantID string) (*entitlements.SubscriptionState, error)
	OtherSubscriptions(ctx context.Context, tenantID string, limit int) ([]entitlements.OtherSubscription, error)
}

// CatalogueReader is what the pages read of plans (*catalogue.Service).
type CatalogueReader interface {
	ListPlans(ctx context.Context) ([]catalogue.Plan, error)
}

// CredentialsReader is what the pages read of API keys
// (*credentials.Service).
type CredentialsReader interface {
	ListKeys(ctx context.Context, tenantID string) ([]credentials.KeySummary, error)
	TenantKey(ctx context.Context, tenantID, keyID string) (credentials.KeySummary, error)
	KeyLive(ctx context.Context, keyID string) (bool, error)
}

// BillingReader is what the console reads of stored Stripe events and the
// resync's repairs (*billing.Service).
type BillingReader interface {
	ListEvents(ctx context.Context, q billing.EventQuery) (billing.EventPage, error)
	GetEvent(ctx context.Context, id string) (billing.Event, error)
	FailedEvents(ctx context.Context, q billing.EventQuery, limit int) ([]string, int64, error)
	FailedAmong(ctx context.Context, ids []string) ([]string, error)
	MeterErrors(ctx context.Context, limit int) ([]billing.MeterError, error)
	ListDrift(ctx context.Context, tenantID string, limit int) ([]billing.DriftRepair, error)
}

// MeteringReader is what the pages read of the usage history and the
// usage reports to Stripe (*metering.Service).
type MeteringReader interface {
	DailyUsage(ctx context.Context, tenantID string, periodStart time.Time) ([]metering.DayUsage, error)
	DailyRefusals(ctx context.Context, tenantID string, from, to time.Time) ([]metering.DayRefusals, error)
	ReportsToCheck(ctx context.Context, limit int) ([]metering.ReportToCheck, error)
}
