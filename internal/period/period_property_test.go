package period

import (
	"math/rand/v2"
	"testing"
	"time"
)

// checkMonthly asserts the properties every monthly period must have: it
// contains at, it is the period of its own start, it is followed without a
// gap or overlap by the next one, and its start keeps the anchor's day
// (clamped to the month's last day) and clock time.
func checkMonthly(t *testing.T, anchor, at time.Time) {
	t.Helper()
	p := Monthly(anchor, at)
	if !p.Contains(at) {
		t.Fatalf("anchor %s at %s: period [%s, %s) does not contain at", anchor, at, p.Start, p.End)
	}
	if !p.End.After(p.Start) {
		t.Fatalf("anchor %s: empty period [%s, %s)", anchor, p.Start, p.End)
	}
	if days := p.End.Sub(p.Start).Hours() / 24; days < 28 || days > 31 {
		t.Fatalf("anchor %s: period [%s, %s) is %.2f days long", anchor, p.Start, p.End, days)
	}
	if q := Monthly(anchor, p.Start); q != p {
		t.Fatalf("anchor %s: Monthly(p.Start) = %+v, want %+v", anchor, q, p)
	}
	if q := Monthly(anchor, p.End.Add(-time.Nanosecond)); q != p {
		t.Fatalf("anchor %s: Monthly(p.End-1ns) = %+v, want %+v", anchor, q, p)
	}
	n := Next(anchor, p)
	if !n.Start.Equal(p.End) {
		t.Fatalf("anchor %s: next period starts %s, this one ends %s (gap or overlap)", anchor, n.Start, p.End)
	}
	prev := Monthly(anchor, p.Start.Add(-time.Nanosecond))
	if !prev.End.Equal(p.Start) {
		t.Fatalf("anchor %s: previous period ends %s, this one starts %s", anchor, prev.End, p.Start)
	}
	a := anchor.UTC()
	for _, s := range []time.Time{p.Start, p.End} {
		want := min(a.Day(), daysIn(s.Year(), s.Month()))
		if s.Day() != want {
			t.Fatalf("anchor %s: boundary %s is on day %d, want %d (the anchor day, clamped)", anchor, s, s.Day(), want)
		}
		if s.Hour() != a.Hour() || s.Minute() != a.Minute() || s.Second() != a.Second() || s.Nanosecond() != a.Nanosecond() {
			t.Fatalf("anchor %s: boundary %s lost the anchor's clock time", anchor, s)
		}
	}
}

func randomInstant(r *rand.Rand, from, to time.Time) time.Time {
	return from.Add(time.Duration(r.Int64N(int64(to.Sub(from)))))
}

// Random anchors (a third of them on the 29th-31st) and random instants
// over decades.
func TestMonthlyProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	from := time.Date(1975, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2095, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 20000; i++ {
		anchor := randomInstant(r, from, to)
		if i%3 == 0 {
			y, m, _ := anchor.Date()
			day := 29 + r.IntN(3)
			if day > daysIn(y, m) {
				day = daysIn(y, m)
			}
			anchor = time.Date(y, m, day, anchor.Hour(), anchor.Minute(), anchor.Second(), 0, time.UTC)
		}
		if i%5 == 0 {
			anchor = anchor.In(time.FixedZone("x", (r.IntN(27)-12)*3600))
		}
		checkMonthly(t, anchor, randomInstant(r, from, to))
	}
}

// Walking period after period from an anchor on the 31st: the day is
// clamped in short months and restored afterwards, never drifting.
func TestMonthlyAnchorDayRestoredAfterShortMonths(t *testing.T) {
	for _, day := range []int{29, 30, 31} {
		anchor := time.Date(2023, 1, day, 8, 30, 0, 0, time.UTC)
		p := Monthly(anchor, anchor)
		for i := 0; i < 12*30; i++ {
			want := min(day, daysIn(p.Start.Year(), p.Start.Month()))
			if p.Start.Day() != want {
				t.Fatalf("anchor day %d: period %d starts %s, want day %d", day, i, p.Start, want)
			}
			p = Next(anchor, p)
		}
	}
}

// Stripe's documented examples of billing_cycle_anchor clamping.
func TestMonthlyStripeExamples(t *testing.T) {
	cases := []struct{ anchor, at, start, end string }{
		// Anchor Jan 31: Feb 28 in a common year, Mar 31 again.
		{"2023-01-31T00:00:00Z", "2023-02-15T00:00:00Z", "2023-01-31T00:00:00Z", "2023-02-28T00:00:00Z"},
		{"2023-01-31T00:00:00Z", "2023-03-15T00:00:00Z", "2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z"},
		{"2023-01-31T00:00:00Z", "2023-04-30T00:00:00Z", "2023-04-30T00:00:00Z", "2023-05-31T00:00:00Z"},
		// Leap year: Feb 29.
		{"2024-01-31T00:00:00Z", "2024-02-29T12:00:00Z", "2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z"},
		// Anchor Jan 30 and 29: Feb 28 (29 in a leap year), then the 30th/29th.
		{"2023-01-30T00:00:00Z", "2023-03-01T00:00:00Z", "2023-02-28T00:00:00Z", "2023-03-30T00:00:00Z"},
		{"2024-01-29T00:00:00Z", "2024-03-01T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-29T00:00:00Z"},
		// Anchor May 31: Jun 30, Jul 31.
		{"2024-05-31T00:00:00Z", "2024-07-01T00:00:00Z", "2024-06-30T00:00:00Z", "2024-07-31T00:00:00Z"},
		// Across a year end.
		{"2024-12-31T10:00:00Z", "2025-01-31T09:59:59Z", "2024-12-31T10:00:00Z", "2025-01-31T10:00:00Z"},
	}
	for _, c := range cases {
		p := Monthly(d(c.anchor), d(c.at))
		if !p.Start.Equal(d(c.start)) || !p.End.Equal(d(c.end)) {
			t.Errorf("anchor %s at %s: [%s, %s), want [%s, %s)", c.anchor, c.at, p.Start, p.End, c.start, c.end)
		}
	}
}

// Current with a subscription: contiguous periods from the subscription's
// own start once its end has passed.
func TestCurrentPropertiesWithSubscription(t *testing.T) {
	r := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2060, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 5000; i++ {
		anchor := randomInstant(r, from, to)
		start := randomInstant(r, from, to)
		sub := &Period{Start: start, End: Monthly(start, start).End}
		at := randomInstant(r, from, to)
		p := Current(anchor, sub, at)
		if !p.Contains(at) {
			t.Fatalf("Current(%s, %+v, %s) = %+v does not contain at", anchor, sub, at, p)
		}
		if !at.Before(sub.Start) {
			if q := Current(anchor, sub, p.Start); q != p {
				t.Fatalf("Current at its own start = %+v, want %+v", q, p)
			}
			if n := Current(anchor, sub, p.End); !n.Start.Equal(p.End) {
				t.Fatalf("gap after %+v: next %+v", p, n)
			}
		}
	}
}

// A Stripe subscription's period is one of the monthly periods of its
// billing anchor, clamped (an anchor on the 31st gives [Feb 28, Mar 31)).
// When its end passes before the renewal arrives, Current must go on with
// the periods Stripe will bill: contiguous from the subscription's end, the
// same as the anchor's own monthly periods.
func TestCurrentRollsLikeTheSubscriptionAnchor(t *testing.T) {
	r := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2060, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 20000; i++ {
		billing := randomInstant(r, from, to)
		if i%2 == 0 {
			y, m, _ := billing.Date()
			billing = time.Date(y, m, min(29+r.IntN(3), daysIn(y, m)), billing.Hour(), billing.Minute(), billing.Second(), 0, time.UTC)
		}
		sub := Monthly(billing, randomInstant(r, billing, to.AddDate(1, 0, 0)))
		at := sub.End.Add(time.Duration(r.Int64N(int64(400 * 24 * time.Hour))))
		got, want := Current(time.Time{}, &sub, at), Monthly(billing, at)
		if got != want {
			t.Fatalf("billing anchor %s, subscription [%s, %s), at %s: Current = [%s, %s), want [%s, %s)",
				billing, sub.Start, sub.End, at, got.Start, got.End, want.Start, want.End)
		}
		if n := Current(time.Time{}, &sub, sub.End); !n.Start.Equal(sub.End) {
			t.Fatalf("subscription [%s, %s): the period after it starts %s", sub.Start, sub.End, n.Start)
		}
	}
}
