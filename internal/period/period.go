// Package period computes billing periods: the Stripe subscription's current
// period when there is one, otherwise monthly periods from the tenant's
// anchor, clamped at month ends the way Stripe clamps them (an anchor on the
// 31st bills on Feb 28 or 29, then on Mar 31 again: the anchor day is never
// moved for good).
package period

import "time"

// Period is the half-open interval [Start, End).
type Period struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Contains reports whether t falls in [Start, End).
func (p Period) Contains(t time.Time) bool { return !t.Before(p.Start) && t.Before(p.End) }

// nth returns the start of the n-th monthly period after anchor (n may be
// negative), in UTC: the anchor's day, clock time and zone offset kept, the
// day clamped to the month's last day.
func nth(anchor time.Time, n int) time.Time {
	a := anchor.UTC()
	y, m := a.Year(), int(a.Month())-1+n
	y += m / 12
	m %= 12
	if m < 0 {
		m += 12
		y--
	}
	month := time.Month(m + 1)
	day := a.Day()
	if last := daysIn(y, month); day > last {
		day = last
	}
	return time.Date(y, month, day, a.Hour(), a.Minute(), a.Second(), a.Nanosecond(), time.UTC)
}

func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// Monthly returns the monthly period anchored on anchor that contains at.
// For at before the anchor it returns earlier periods, so the function is
// total.
func Monthly(anchor, at time.Time) Period {
	a, t := anchor.UTC(), at.UTC()
	// Months between anchor and at, then step by one to fix the estimate.
	n := (t.Year()-a.Year())*12 + int(t.Month()) - int(a.Month())
	for nth(anchor, n).After(t) {
		n--
	}
	for !nth(anchor, n+1).After(t) {
		n++
	}
	return Period{Start: nth(anchor, n), End: nth(anchor, n+1)}
}

// Next returns the monthly period after p for the given anchor.
func Next(anchor time.Time, p Period) Period {
	return Monthly(anchor, p.End)
}

// Window says how quotas reset inside a subscription's billing period.
type Window string

const (
	// Month: monthly windows on the billing anchor day, whatever the
	// price's interval (an annual price still gets a monthly quota). The
	// default.
	Month Window = "month"
	// BillingPeriod: one window per billing period (a yearly quota on an
	// annual price).
	BillingPeriod Window = "billing_period"
)

// Valid reports whether w is a known window ("" counts as Month).
func (w Window) Valid() bool { return w == "" || w == Month || w == BillingPeriod }

// Current is the monthly quota window at time at; see In.
func Current(anchor time.Time, sub *Period, at time.Time) Period {
	return In(Month, anchor, sub, at)
}

// In is the quota window at time at. With a subscription period (Stripe's
// figures win) that contains at: the whole billing period for
// BillingPeriod, and for Month the billing period itself when it is at
// most a month long, else the month of it that contains at, months
// anchored on the billing anchor day and clamped at month ends (a yearly
// period from Jan 31 gives Jan 31, Feb 28, Mar 31, …) and at the period's
// end. A subscription period that at has passed (its renewal webhook has
// not arrived yet) rolls forward the way Stripe will renew it: monthly,
// or for BillingPeriod by the period's own length. Without a subscription
// period: monthly from the tenant's anchor.
func In(w Window, anchor time.Time, sub *Period, at time.Time) Period {
	if sub == nil || sub.Start.IsZero() || !sub.End.After(sub.Start) {
		return Monthly(anchor, at)
	}
	bp := Period{Start: sub.Start.UTC(), End: sub.End.UTC()}
	a := billingAnchor(bp)
	if bp.Contains(at) {
		if w == BillingPeriod || !longerThanMonth(a, bp) {
			return bp
		}
		m := Monthly(a, at)
		if m.Start.Before(bp.Start) {
			m.Start = bp.Start
		}
		if m.End.After(bp.End) {
			m.End = bp.End
		}
		return m
	}
	if at.Before(bp.Start) {
		return Monthly(anchor, at)
	}
	if w == BillingPeriod && longerThanMonth(a, bp) {
		return every(a, months(bp), at)
	}
	if w == BillingPeriod && bp.End.Sub(bp.Start) < 27*24*time.Hour {
		// A weekly or daily price: roll by its fixed length.
		d := bp.End.Sub(bp.Start)
		n := at.Sub(bp.End) / d
		s := bp.End.Add(n * d)
		return Period{Start: s, End: s.Add(d)}
	}
	return Monthly(a, at)
}

// billingAnchor is the boundary of bp whose day of month is the billing
// anchor's: a clamped boundary (Feb 28 of an anchor on the 31st) must not
// become the anchor, and of the two boundaries the later day of month is
// the anchor's (or both are the same day).
func billingAnchor(bp Period) time.Time {
	if bp.End.Day() > bp.Start.Day() {
		return bp.End
	}
	return bp.Start
}

// longerThanMonth reports whether bp lasts more than one month from its
// start (a quarterly or yearly price). A day of slack keeps a monthly
// period whose end Stripe moved a little (a clock-time change) whole.
func longerThanMonth(anchor time.Time, bp Period) bool {
	first := Monthly(anchor, bp.Start)
	return bp.End.Sub(first.End) > 24*time.Hour
}

// months is bp's length in whole calendar months (12 for a yearly price).
func months(bp Period) int {
	n := (bp.End.Year()-bp.Start.Year())*12 + int(bp.End.Month()) - int(bp.Start.Month())
	return max(n, 1)
}

// every is Monthly with a step of k months.
func every(anchor time.Time, k int, at time.Time) Period {
	a, t := anchor.UTC(), at.UTC()
	n := ((t.Year()-a.Year())*12 + int(t.Month()) - int(a.Month())) / k
	for nth(anchor, n*k).After(t) {
		n--
	}
	for !nth(anchor, (n+1)*k).After(t) {
		n++
	}
	return Period{Start: nth(anchor, n*k), End: nth(anchor, (n+1)*k)}
}
