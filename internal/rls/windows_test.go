package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestWindowUnit: a window whose length is one of Envoy's units is told in
// it; any other length as its average rate in a unit where that is at
// least 1, rounded down, never more than the window allows.
func TestWindowUnit(t *testing.T) {
	const (
		S = rlsv3.RateLimitResponse_RateLimit_SECOND
		M = rlsv3.RateLimitResponse_RateLimit_MINUTE
		H = rlsv3.RateLimitResponse_RateLimit_HOUR
		D = rlsv3.RateLimitResponse_RateLimit_DAY
		W = rlsv3.RateLimitResponse_RateLimit_WEEK
	)
	for _, c := range []struct {
		limit  int64
		length time.Duration
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		n      uint32
	}{
		{10, time.Second, S, 10},
		{60, time.Minute, M, 60},
		{5000, time.Hour, H, 5000},
		{100000, 24 * time.Hour, D, 100000},
		{7, 7 * 24 * time.Hour, W, 7},
		{5000, 90 * time.Minute, H, 3333},
		{100, 10 * time.Second, S, 10},
		{5, 10 * time.Second, M, 30}, // under 1 a second
		{1, 48 * time.Hour, W, 3},    // under 1 a day, under 1 an hour
		{30, 744 * time.Hour, W, 6},
		{1, 744 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH, 1},
	} {
		unit, n := windowUnit(c.limit, c.length)
		if unit != c.unit || n != c.n {
			t.Errorf("%d per %v: %d %v, want %d %v", c.limit, c.length, n, unit, c.n, c.unit)
		}
	}
}
