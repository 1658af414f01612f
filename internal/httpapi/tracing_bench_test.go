package httpapi

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// BenchmarkDecideTracingOff compares a decision through s.allow with
// tracing off against the limiter called directly (the request path before
// tracing existed), alternating the two call by call so that a noisy
// machine's drift hits both alike; it reports each one's median latency and
// their ratio. Off, the wrapper is one atomic load.
//
//	go test -run '^$' -bench BenchmarkDecideTracingOff -benchtime 20000x ./internal/httpapi/
func BenchmarkDecideTracingOff(b *testing.B) {
	rdb, prefix := redistest.New(b)
	lim, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	s := &Server{Deps: Deps{Limiter: lim}}
	req := limiter.Request{Limits: &limiter.Limits{Rate: &limiter.Rate{PerSecond: 1e9, Burst: 1e9}}}
	ctx := context.Background()
	var direct, off []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		if i%2 == 0 {
			_, err = lim.Allow(ctx, "bench-tenant", req)
			direct = append(direct, time.Since(start))
		} else {
			_, err = s.allow(ctx, "bench-tenant", req)
			off = append(off, time.Since(start))
		}
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
	med := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds())
	}
	md, mo := med(direct), med(off)
	b.ReportMetric(md, "direct-p50-ns")
	b.ReportMetric(mo, "off-p50-ns")
	if md > 0 {
		b.ReportMetric(mo/md, "off/direct")
	}
}
