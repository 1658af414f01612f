package period

import (
	"testing"
	"time"
)

// FuzzMonthly checks the period properties for any anchor and instant
// between 1900 and 2200 (seconds and nanoseconds fuzzed apart).
func FuzzMonthly(f *testing.F) {
	for _, s := range [][2]string{
		{"2024-01-31T10:00:00Z", "2024-02-29T09:59:59Z"},
		{"2023-01-31T00:00:00Z", "2023-03-01T00:00:00Z"},
		{"2024-02-29T23:59:59Z", "2025-02-28T23:59:59Z"},
		{"2024-03-31T00:00:00Z", "2024-01-01T00:00:00Z"},
	} {
		f.Add(d(s[0]).Unix(), int64(0), d(s[1]).Unix(), int64(0), int64(0))
	}
	lo := time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	span := hi - lo
	f.Fuzz(func(t *testing.T, anchorSec, anchorNs, atSec, atNs, zone int64) {
		norm := func(s int64) int64 {
			s %= span
			if s < 0 {
				s += span
			}
			return lo + s
		}
		ns := func(n int64) int64 {
			n %= 1e9
			if n < 0 {
				n = -n
			}
			return n
		}
		offset := int((zone%(14*4) + 14*4) % (14 * 4) * 900) // quarter hours up to +14h
		anchor := time.Unix(norm(anchorSec), ns(anchorNs)).In(time.FixedZone("f", offset))
		at := time.Unix(norm(atSec), ns(atNs)).UTC()
		checkMonthly(t, anchor, at)
	})
}
