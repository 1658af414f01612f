package limiter_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// BenchmarkOverload measures goodput under overload (issue 21's target):
// the decisions/s one Limiter sustains (closed loop, 32 callers, one
// second), then an open-loop load at 3x that rate for two seconds:
// admitted decisions/s as a share of the peak, the p99 of answered
// decisions against the p99 of an open loop at half the peak, and the
// share shed (ErrOverloaded: a 503). Run with
//
//	go test -run '^$' -bench Overload -benchtime 1x -count 3 ./limiter/
func BenchmarkOverload(b *testing.B) {
	for i := 0; i < b.N; i++ {
		overloadRun(b)
	}
}

func overloadRun(b *testing.B) {
	be := singleRedis(b)
	l, err := limiter.New(be.client(), limiter.Options{Prefix: be.prefix, AdaptiveConcurrency: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	st := newStore(be.client(), be.prefix)
	if err := st.PutSnapshot(context.Background(), snapshot("ov", func(s *limiter.Snapshot) {
		s.Rate = &limiter.Rate{PerSecond: 1e9, Burst: 1e9}
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 1 << 40, Mode: limiter.ModeHard}}
	})); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var n atomic.Int64
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if d, err := l.Allow(ctx, "ov", limiter.Request{Cost: 1}); err == nil && d.Allowed {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	peak := float64(n.Load())
	open := func(rate float64, dur time.Duration) (admitted float64, p99 time.Duration, shed float64) {
		var adm, sh, total atomic.Int64
		var mu sync.Mutex
		var lats []time.Duration
		var wg sync.WaitGroup
		const tick = time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		begin := time.Now()
		sent := 0.0
		for now := range t.C {
			el := now.Sub(begin)
			if el > dur {
				break
			}
			// Open loop: what is due by now is sent, however late the tick.
			for ; sent < rate*el.Seconds(); sent++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := time.Now()
					d, err := l.Allow(ctx, "ov", limiter.Request{Cost: 1})
					total.Add(1)
					if errors.Is(err, limiter.ErrOverloaded) {
						sh.Add(1)
						return
					}
					lat := time.Since(s)
					mu.Lock()
					lats = append(lats, lat)
					mu.Unlock()
					if err == nil && d.Allowed {
						adm.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		slices.Sort(lats)
		if len(lats) > 0 {
			p99 = lats[len(lats)*99/100]
		}
		return float64(adm.Load()) / dur.Seconds(), p99, float64(sh.Load()) / float64(max(1, total.Load()))
	}
	_, p99half, _ := open(peak/2, time.Second)
	adm3, p99three, shed3 := open(3*peak, 2*time.Second)
	b.ReportMetric(peak, "peak/s")
	b.ReportMetric(adm3/peak, "goodput-ratio")
	b.ReportMetric(float64(p99half.Microseconds()), "p99-half-µs")
	b.ReportMetric(float64(p99three.Microseconds()), "p99-3x-µs")
	b.ReportMetric(float64(p99three)/float64(max(1, p99half)), "p99-ratio")
	b.ReportMetric(shed3, "shed-share")
}
