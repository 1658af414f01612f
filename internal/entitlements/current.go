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
// join): the live one (active, trialing or past_due) updated last, else the
// one updated last. No row when the tenant never had a subscription.
func CurrentSubscriptionOf(tenant string) string {
	return `SELECT * FROM subscriptions WHERE tenant_id = ` + tenant +
		` ORDER BY (status IN (` + liveStatuses + `)) DESC, updated_at DESC LIMIT 1`
}

// Live reports whether a subscription of this status grants its plan.
func Live(status string) bool {
	switch status {
	case StatusActive, StatusTrialing, StatusPastDue:
		return true
	}
	return false
}
