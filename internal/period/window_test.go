package period

import (
	"math/rand/v2"
	"testing"
	"time"
)

// An annual price still resets quotas monthly on the billing anchor day,
// clamped at month ends like Stripe (anchor on the 31st: Feb 28, then Mar
// 31 again), and the last month ends with the billing period.
func TestMonthlyWindowsOfYearlyPeriod(t *testing.T) {
	sub := &Period{Start: d("2025-01-31T09:30:00Z"), End: d("2026-01-31T09:30:00Z")}
	cases := []struct{ at, start, end string }{
		{"2025-01-31T09:30:00Z", "2025-01-31T09:30:00Z", "2025-02-28T09:30:00Z"},
		{"2025-02-28T09:29:59Z", "2025-01-31T09:30:00Z", "2025-02-28T09:30:00Z"},
		{"2025-02-28T09:30:00Z", "2025-02-28T09:30:00Z", "2025-03-31T09:30:00Z"},
		{"2025-04-30T12:00:00Z", "2025-04-30T09:30:00Z", "2025-05-31T09:30:00Z"},
		{"2026-01-30T00:00:00Z", "2025-12-31T09:30:00Z", "2026-01-31T09:30:00Z"},
		// Past the period before the renewal webhook: next year's months.
		{"2026-02-10T00:00:00Z", "2026-01-31T09:30:00Z", "2026-02-28T09:30:00Z"},
	}
	for _, c := range cases {
		p := Current(d("2020-01-01T00:00:00Z"), sub, d(c.at))
		if !p.Start.Equal(d(c.start)) || !p.End.Equal(d(c.end)) {
			t.Errorf("Current(%s) = [%s, %s), want [%s, %s)", c.at, p.Start, p.End, c.start, c.end)
		}
		if w := In(BillingPeriod, time.Time{}, sub, d(c.at)); c.at < "2026-01-31" && (w != Period{Start: sub.Start, End: sub.End}) {
			t.Errorf("In(BillingPeriod, %s) = %+v, want the whole year", c.at, w)
		}
	}
	// billing_period past the end rolls by a year.
	if w := In(BillingPeriod, time.Time{}, sub, d("2026-06-01T00:00:00Z")); !w.Start.Equal(d("2026-01-31T09:30:00Z")) || !w.End.Equal(d("2027-01-31T09:30:00Z")) {
		t.Errorf("In(BillingPeriod) after the year = %+v", w)
	}
}

// A yearly period that starts clamped (anchor Feb 29 renewed on Feb 28) and
// anchors on the 29th and 30th.
func TestMonthlyWindowsAnchors29To31(t *testing.T) {
	cases := []struct {
		start, end string
		want       []string // window starts after the period start
	}{
		{"2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z", []string{"2024-03-29", "2024-04-29", "2024-12-29", "2025-01-29"}},
		{"2024-01-30T00:00:00Z", "2025-01-30T00:00:00Z", []string{"2024-02-29", "2024-03-30", "2024-04-30", "2024-12-30"}},
		{"2025-01-29T00:00:00Z", "2026-01-29T00:00:00Z", []string{"2025-02-28", "2025-03-29", "2025-12-29"}},
		// Quarterly from a clamped boundary: the end's day is the anchor's.
		{"2025-02-28T00:00:00Z", "2025-05-31T00:00:00Z", []string{"2025-03-31", "2025-04-30"}},
	}
	for _, c := range cases {
		sub := &Period{Start: d(c.start), End: d(c.end)}
		starts := map[string]bool{}
		for p := Current(time.Time{}, sub, sub.Start); p.Start.Before(sub.End); p = Current(time.Time{}, sub, p.End) {
			starts[p.Start.Format("2006-01-02")] = true
			if p.End.After(sub.End) {
				t.Fatalf("%s: window %+v passes the period end", c.start, p)
			}
			if p.End.Equal(sub.End) {
				break
			}
		}
		for _, w := range c.want {
			if !starts[w] {
				t.Errorf("period %s–%s: no window starts on %s (starts: %v)", c.start, c.end, w, starts)
			}
		}
	}
}

// A monthly subscription period is used exactly as Stripe gives it, in
// either mode.
func TestMonthlyPeriodKeptWhole(t *testing.T) {
	for _, sub := range []*Period{
		{Start: d("2025-01-31T00:00:00Z"), End: d("2025-02-28T00:00:00Z")},
		{Start: d("2025-02-28T00:00:00Z"), End: d("2025-03-31T00:00:00Z")},
		{Start: d("2025-03-10T00:00:00Z"), End: d("2025-03-24T00:00:00Z")}, // a trial
	} {
		for _, w := range []Window{Month, BillingPeriod} {
			if p := In(w, time.Time{}, sub, sub.Start.Add(time.Hour)); p != *sub {
				t.Errorf("In(%s, %+v) = %+v, want the period itself", w, sub, p)
			}
		}
	}
}

// Random billing periods of 1, 3, 6 and 12 months on random anchors: the
// monthly windows tile the period exactly (contiguous, no overlap, first
// starts at its start, last ends at its end), each is 28-31 days, each is
// the window of its own start and of its last instant, and there are as
// many as the period has months.
func TestMonthlyWindowsTileBillingPeriod(t *testing.T) {
	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	from := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2080, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 3000; i++ {
		anchor := randomInstant(r, from, to).Truncate(time.Second)
		if i%3 == 0 { // a third on the 29th-31st
			anchor = time.Date(anchor.Year(), 1, 29+r.IntN(3), anchor.Hour(), anchor.Minute(), anchor.Second(), 0, time.UTC).AddDate(0, r.IntN(12), 0)
			anchor = nth(anchor, 0)
		}
		k := []int{1, 3, 6, 12}[r.IntN(4)]
		// The billing period Stripe would give: k months from some
		// renewal of the anchor.
		n := r.IntN(40) * k
		sub := Period{Start: nth(anchor, n), End: nth(anchor, n+k)}
		count := 0
		prevEnd := sub.Start
		for at := sub.Start; at.Before(sub.End); {
			p := Current(time.Time{}, &sub, at)
			if !p.Contains(at) || !p.Start.Equal(prevEnd) {
				t.Fatalf("sub %+v at %s: window %+v (previous ended %s)", sub, at, p, prevEnd)
			}
			if days := p.End.Sub(p.Start).Hours() / 24; days < 28 || days > 31 {
				t.Fatalf("sub %+v: window %+v is %.2f days", sub, p, days)
			}
			if q := Current(time.Time{}, &sub, p.End.Add(-time.Nanosecond)); q != p {
				t.Fatalf("sub %+v: window of last instant %+v, want %+v", sub, q, p)
			}
			prevEnd = p.End
			at = p.End
			count++
		}
		if !prevEnd.Equal(sub.End) || count != k {
			t.Fatalf("sub %+v (anchor %s, %d months): %d windows ending %s", sub, anchor, k, count, prevEnd)
		}
	}
}
