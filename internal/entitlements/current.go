package entitlements

// The tenant's current subscription is defined once, in the database: the
// view current_subscriptions (migration 00075, owned here). The limiter
// enforces what the snapshot computes from it, so metering's periods, the
// console and billing's plan changes read the same view and pick the same
// row. Query it per tenant (WHERE tenant_id = …, or a LATERAL subquery
// with LIMIT 1, see the migration).

// liveStatuses are the statuses under which a subscription grants its plan.
const liveStatuses = `'` + StatusActive + `', '` + StatusTrialing + `', '` + StatusPastDue + `'`

// currentOrder is the view's ranking of a tenant's plan subscriptions (its
// ORDER BY after tenant_id); here it only orders the overlapping ones.
const currentOrder = `(status IN (` + liveStatuses + `)) DESC, start_date DESC NULLS LAST, stripe_created DESC NULLS LAST, updated_at DESC, id DESC`

// OverlappingSubscriptionsOf is SQL selecting the ids of the tenant's live
// plan subscriptions other than the current one, newest first: a
// re-subscribe running beside the old subscription until its period ends.
// The console shows them; they grant their add-ons, never the plan.
func OverlappingSubscriptionsOf(tenant string) string {
	return `SELECT id FROM subscriptions WHERE tenant_id = ` + tenant + ` AND has_plan_item AND status IN (` + liveStatuses + `)
   AND id IS DISTINCT FROM (SELECT c.id FROM current_subscriptions c WHERE c.tenant_id = ` + tenant + `)
 ORDER BY ` + currentOrder
}

// Live reports whether a subscription of this status grants its plan.
func Live(status string) bool {
	switch status {
	case StatusActive, StatusTrialing, StatusPastDue:
		return true
	}
	return false
}
