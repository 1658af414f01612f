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

// Current is the period at time at: the subscription's when given and
// containing at (Stripe's own figures win), else the monthly one from the
// anchor. A subscription period that at has passed (its renewal webhook has
// not arrived yet) rolls forward monthly on its billing anchor day, the way
// Stripe will renew it.
func Current(anchor time.Time, sub *Period, at time.Time) Period {
	if sub != nil && !sub.Start.IsZero() && sub.End.After(sub.Start) {
		if sub.Contains(at) {
			return Period{Start: sub.Start.UTC(), End: sub.End.UTC()}
		}
		if !at.Before(sub.End) {
			// Roll on the subscription's billing anchor day. A clamped
			// boundary (Feb 28 of an anchor on the 31st) must not become
			// the anchor: of the two boundaries, the later day of month is
			// the anchor's (or both are the same day).
			a := sub.Start
			if sub.End.UTC().Day() > a.UTC().Day() {
				a = sub.End
			}
			return Monthly(a, at)
		}
	}
	return Monthly(anchor, at)
}
