package rls

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// windowUnits are Envoy's units a window can be told in, longest first.
var windowUnits = []struct {
	d    time.Duration
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// windowUnit expresses a window of limit per length in Envoy's terms. A
// length that is one of Envoy's units (1s, 1m, 1h, 24h, 168h) is that unit
// with the window's limit. Any other length has no unit of its own, so the
// answer is the window's average rate, rounded down, in the longest unit
// not longer than the window where that is at least 1: "5000 per 90m" is
// told as 3333 an HOUR, never as 5000 an hour, which it does not allow.
// A window too sparse for that (1 per 48h) is told in the shortest longer
// unit (3 a WEEK), still never more than it allows. The exact window is in
// the RateLimit-Policy header the answer carries (w=5400).
func windowUnit(limit int64, length time.Duration) (rlsv3.RateLimitResponse_RateLimit_Unit, uint32) {
	for _, u := range windowUnits {
		if length == u.d {
			return u.unit, clampU32(float64(limit))
		}
	}
	per := func(d time.Duration) float64 { return math.Floor(float64(limit) * float64(d) / float64(length)) }
	for _, u := range windowUnits { // longest first
		if u.d < length && per(u.d) >= 1 {
			return u.unit, clampU32(per(u.d))
		}
	}
	for i := len(windowUnits) - 1; i >= 0; i-- { // shortest first
		if u := windowUnits[i]; u.d > length && per(u.d) >= 1 {
			return u.unit, clampU32(per(u.d))
		}
	}
	// sparser than 1 a week over a window longer than a week (up to 744h)
	return rlsv3.RateLimitResponse_RateLimit_MONTH, clampU32(max(per(30*24*time.Hour), 1))
}
