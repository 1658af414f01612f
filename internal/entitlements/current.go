package entitlements

// The tenant's current subscription is defined here once, because the
// limiter enforces what the snapshot computes from it: metering's periods,
// the console, and billing's plan changes must pick the same row, or the
// console shows (and billing changes) a different subscription than the
// one enforced.

// liveStatuses are the statuses under which a subscription grants its plan.
const liveStatuses = `'` + StatusActive + `', '` + StatusTrialing + `', '` + StatusPastDue + `'`

// CurrentSubscriptionOf is SQL selecting every column of the current
// subscription of the tenant whose id is the SQL expression tenant (a
// parameter such as "$1", or a column such as "t.id" inside a LATERAL
// join): of the subscriptions with a plan item (an add-on billed on its own
// never carries the plan), the live one (active, trialing or past_due) that
// started last (Stripe's start_date, then created, then id), else the one
// that started last. No row when the tenant never had one.
//
// The order uses only what Stripe says about each subscription, never when
// its events were applied, so that any delivery order of a customer's
// events ends on the same subscription (issue 25). updated_at only orders
// rows stored before start_date was (tests and old rows).
func CurrentSubscriptionOf(tenant string) string {
	return `SELECT * FROM subscriptions WHERE tenant_id = ` + tenant + ` AND has_plan_item` +
		` ORDER BY ` + currentOrder + ` LIMIT 1`
}

// currentOrder ranks a tenant's plan subscriptions, the first is current;
// the other live ones are overlapping (OverlappingSubscriptionsOf).
const currentOrder = `(status IN (` + liveStatuses + `)) DESC, start_date DESC NULLS LAST, stripe_created DESC NULLS LAST, updated_at DESC, id DESC`

// OverlappingSubscriptionsOf is SQL selecting the ids of the tenant's live
// plan subscriptions other than the current one, newest first: a
// re-subscribe running beside the old subscription until its period ends.
// The console shows them; they grant their add-ons, never the plan.
func OverlappingSubscriptionsOf(tenant string) string {
	return `SELECT id FROM (SELECT id, status, row_number() OVER (ORDER BY ` + currentOrder + `) AS n
  FROM subscriptions WHERE tenant_id = ` + tenant + ` AND has_plan_item) o
 WHERE n > 1 AND status IN (` + liveStatuses + `) ORDER BY n`
}

// Live reports whether a subscription of this status grants its plan.
func Live(status string) bool {
	switch status {
	case StatusActive, StatusTrialing, StatusPastDue:
		return true
	}
	return false
}
