// Package entitlements owns what each tenant may do: tenants, overrides,
// subscriptions, and the snapshot of limits the limiter enforces. Plans,
// add-ons and their prices are internal/catalogue's (read here inside the
// snapshot's transaction; a catalogue change reaches tenants through
// TouchCatalogue); API keys and service tokens are internal/credentials'.
//
// Rules this package keeps:
//   - Postgres is the system of record; a snapshot in Redis is only ever a
//     copy of what BuildSnapshot computes from Postgres.
//   - Every change of what a tenant may do bumps tenants.entitlement_version
//     and records an entitlement_versions row (with the reason and the
//     snapshot) in the same transaction; the snapshot is published to Redis
//     only after the commit, so the limiter never sees an uncommitted change.
//   - Access follows the subscription status: active and trialing get the
//     tenant's plan; past_due keeps it until the grace period ends; unpaid,
//     canceled, incomplete, incomplete_expired and paused fall back to the
//     default plan. A tenant without a subscription has its plan, "active".
//   - A fallback never lifts a limit: what the default plan leaves unlimited
//     keeps the tenant's own plan's limit.
package entitlements
