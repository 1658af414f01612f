// Package catalogue is the product catalogue: plans (limits, windows,
// quotas), their versions, add-ons, and the Stripe prices and products that
// map to them. It owns the tables plans, plan_quotas, plan_versions,
// catalogue_prices, catalogue_products and addon_grants, and is the only
// package whose SQL names them.
//
// It is a package of its own because what is for sale and who bought it
// change for different reasons: the catalogue's rules (validation, prices
// mapped once, versions kept) share nothing with a tenant's snapshot
// arithmetic, except the plan a snapshot reads. The dependency runs
// entitlements → catalogue, never back:
//   - entitlements reads the catalogue inside its own transactions through
//     the functions that take a postgres.Querier (ReadPlans, PlanAt,
//     PinnedVersion, AddonsForItems, PlanExists, PlanNames), so that a
//     snapshot sees tenants and plans at one instant;
//   - a change that reaches tenants (a plan edit, an add-on put or
//     deleted) calls Options.Touch last in its transaction, which
//     entitlements provides: the tenants' version bumps commit with the
//     change, and their snapshots are published after the commit.
package catalogue
