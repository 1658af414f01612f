package web

import (
	"context"
	"net/http"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/limiter"
)

// The services the pages read through and act through. They are declared
// here, where they are consumed; cmd/api passes the real services.

// Snapshots gives a tenant's effective entitlements as built from Postgres
// (entitlements.Service).
type Snapshots interface {
	SnapshotFromPostgres(ctx context.Context, tenantID string) (limiter.Snapshot, error)
}

// UsageReader is GET /v1/usage's own computation (metering.Service), so the
// dashboard can never show other numbers than the API.
type UsageReader interface {
	Usage(ctx context.Context, tenantID string) (metering.Usage, error)
}

// PlanAdmin creates and edits plans (catalogue.Service); an edit reaches
// every tenant on the plan through a new entitlement version, and its
// preview (the edit's own statements, rolled back) names them.
type PlanAdmin interface {
	CreatePlan(ctx context.Context, in catalogue.PlanInput) (catalogue.Plan, error)
	PatchPlan(ctx context.Context, key string, patch catalogue.PlanPatch) (catalogue.Plan, error)
	PreviewPlanPatch(ctx context.Context, key string, patch catalogue.PlanPatch) (catalogue.PlanEffect, error)
}

// AddonAdmin manages add-on grants (catalogue.Service).
type AddonAdmin interface {
	ListAddons(ctx context.Context) ([]catalogue.Addon, error)
	PutAddon(ctx context.Context, priceID string, in catalogue.AddonInput) (catalogue.Addon, bool, error)
	DeleteAddon(ctx context.Context, priceID string) error
}

// KeyManager issues, revokes and checks API keys (credentials.Service).
type KeyManager interface {
	IssueKey(ctx context.Context, tenantID, name string) (credentials.IssuedKey, error)
	RevokeKey(ctx context.Context, keyID string) error
	// AuthenticateKey checks a key; with suspect, a key the in-process key
	// index does not know is refused without a database lookup.
	AuthenticateKey(ctx context.Context, rawKey string, suspect bool) (credentials.KeyInfo, error)
}

// EventReplayer queues a stored Stripe event to be processed again
// (billing).
type EventReplayer interface {
	Replay(ctx context.Context, eventID string) (billing.Event, error)
}

// OverrideManager grants and removes per-tenant quota overrides
// (entitlements.Service); each change is a new entitlement version.
type OverrideManager interface {
	CreateOverride(ctx context.Context, tenantID string, in entitlements.OverrideInput) (entitlements.Override, error)
	DeleteOverride(ctx context.Context, tenantID, overrideID string) error
}

// Previewer computes what a change would do before an admin confirms it
// (entitlements.Service: the change's own statements, rolled back).
type Previewer interface {
	PreviewPlanChange(ctx context.Context, tenantID, planKey string) (entitlements.Effect, error)
	PreviewOverrideRemoval(ctx context.Context, tenantID, overrideID string) (entitlements.Effect, string, error)
}

// TenantCreator creates and edits tenants (entitlements.Service, the
// functions behind POST and PATCH /admin/v1/tenants).
type TenantCreator interface {
	CreateTenant(ctx context.Context, in entitlements.TenantInput) (entitlements.Tenant, error)
	UpdateTenant(ctx context.Context, id string, p entitlements.TenantPatch) (entitlements.Tenant, error)
}

// LoginGuard limits failed logins per client address, shared by every
// instance (httpapi.AuthLimiter). The credential is always checked first, so
// a valid one is never refused: Failed records a failure and returns an
// error once the address has no failures left; Blocked says whether an
// address is already out of them (to skip a database lookup of a key that
// is certainly unknown). bucket is "admin" or "key".
type LoginGuard interface {
	Address(r *http.Request) string
	Blocked(ctx context.Context, bucket string, addr string) error
	Failed(ctx context.Context, bucket string, addr string) error
}

// Resyncer re-reads a tenant's Stripe customer and repairs what differs
// (billing); nil hides the button.
type Resyncer interface {
	ResyncTenant(ctx context.Context, tenantID string) ([]billing.DriftRepair, error)
}

// Upgrader sends a tenant to Stripe to move to a public plan (billing):
// Checkout without a live subscription, the customer portal's update
// confirmation with one. nil (no STRIPE_SECRET_KEY) leaves the dashboard
// saying whom to ask instead.
type Upgrader interface {
	// StartUpgradePrice sends the tenant to Stripe for a plan through one
	// of its prices ("" = the plan's default).
	StartUpgradePrice(ctx context.Context, tenantID, planKey, priceID string, urls billing.UpgradeURLs) (billing.Upgrade, error)
	// Prices reads the prices' interval, currency and amount from Stripe.
	Prices(ctx context.Context, ids []string) map[string]billing.PriceInfo
}

// AttemptLimiter decides one attempt against explicit limits
// (*limiter.Limiter, shared by every instance through Redis); it bounds how
// often a tenant may start a plan change, each of which costs Stripe calls.
type AttemptLimiter interface {
	Allow(ctx context.Context, key string, req limiter.Request) (*limiter.Decision, error)
}
