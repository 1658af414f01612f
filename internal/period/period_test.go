package period

import (
	"testing"
	"time"
)

func d(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Stripe's documented clamping: an anchor on Jan 31 bills Feb 28 (29 in a leap
// year), then Mar 31, never drifting to the 28th.
func TestMonthlyClampsLikeStripe(t *testing.T) {
	anchor := d("2024-01-31T10:00:00Z")
	cases := []struct{ at, start, end string }{
		{"2024-02-01T00:00:00Z", "2024-01-31T10:00:00Z", "2024-02-29T10:00:00Z"},
		{"2024-03-01T00:00:00Z", "2024-02-29T10:00:00Z", "2024-03-31T10:00:00Z"},
		{"2024-04-15T00:00:00Z", "2024-03-31T10:00:00Z", "2024-04-30T10:00:00Z"},
		{"2025-02-28T10:00:00Z", "2025-02-28T10:00:00Z", "2025-03-31T10:00:00Z"},
		{"2025-02-28T09:59:59Z", "2025-01-31T10:00:00Z", "2025-02-28T10:00:00Z"},
	}
	for _, c := range cases {
		p := Monthly(anchor, d(c.at))
		if !p.Start.Equal(d(c.start)) || !p.End.Equal(d(c.end)) {
			t.Errorf("Monthly(%s) = [%s, %s), want [%s, %s)", c.at, p.Start, p.End, c.start, c.end)
		}
	}
}

func TestCurrentPrefersSubscription(t *testing.T) {
	anchor := d("2024-01-15T00:00:00Z")
	sub := &Period{Start: d("2024-03-03T00:00:00Z"), End: d("2024-04-03T00:00:00Z")}
	if p := Current(anchor, sub, d("2024-03-20T00:00:00Z")); !p.Start.Equal(sub.Start) || !p.End.Equal(sub.End) {
		t.Fatalf("Current = %+v, want the subscription's period", p)
	}
	// Past the subscription's end before the renewal webhook: roll from its start.
	if p := Current(anchor, sub, d("2024-04-05T00:00:00Z")); !p.Start.Equal(d("2024-04-03T00:00:00Z")) || !p.End.Equal(d("2024-05-03T00:00:00Z")) {
		t.Fatalf("Current after sub end = %+v", p)
	}
	if p := Current(anchor, nil, d("2024-03-20T00:00:00Z")); !p.Start.Equal(d("2024-03-15T00:00:00Z")) {
		t.Fatalf("Current without sub = %+v", p)
	}
}
