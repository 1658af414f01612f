package limiterbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
	"github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"
)

// background tells the limiter's own calls (its heartbeat, the client's
// handshake) from the decisions' round trips.
func background(cmd redis.Cmder) bool {
	if n := cmd.Name(); n == "hello" || n == "client" {
		return true
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, ":instances") {
			return true
		}
	}
	return false
}

// roundTrips counts client round trips: one per command, one per pipeline.
type roundTrips struct {
	n    atomic.Int64
	cmds sync.Map // command name -> *atomic.Int64 (single commands only)
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if background(cmd) {
			return next(ctx, cmd)
		}
		h.n.Add(1)
		c, _ := h.cmds.LoadOrStore(cmd.Name(), new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		c, _ := h.cmds.LoadOrStore("pipeline", new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
		return next(ctx, cmds)
	}
}

func benchTenants(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		var b [16]byte
		_, _ = rand.Read(b[:])
		h := hex.EncodeToString(b[:])
		ids[i] = h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	return ids
}

func benchClient(b *testing.B) (*redis.Client, *roundTrips) {
	opt, err := redis.ParseURL(redisproc.URL())
	if err != nil {
		b.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	b.Cleanup(func() { rdb.Close() })
	rt := &roundTrips{}
	rdb.AddHook(rt)
	return rdb, rt
}

// runBench runs op from g goroutines and reports round trips per op and
// the p50/p99 latency (µs).
func runBench(b *testing.B, g int, rt *roundTrips, op func(ctx context.Context, rng *mrand.Rand) error) {
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	var seed atomic.Uint64
	before := rt.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	par := max(1, g/runtime.GOMAXPROCS(0)) // RunParallel runs GOMAXPROCS × par goroutines
	if g == 1 {
		rng := mrand.New(mrand.NewPCG(seed.Add(1), 1))
		lat = make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := op(ctx, rng); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
	} else {
		b.SetParallelism(par)
		b.RunParallel(func(pb *testing.PB) {
			rng := mrand.New(mrand.NewPCG(seed.Add(1), 1))
			mine := make([]time.Duration, 0, 1024)
			for pb.Next() {
				t0 := time.Now()
				if err := op(ctx, rng); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "rt/op")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkAllow compares our full decision (rate + monthly quota, snapshot
// from the near-cache) with go-redis/redis_rate v10 Allow, side by side in
// one run, at 1 and 32 goroutines over 10,000 tenants. Compare the
// sub-benchmarks of the same -count iteration: the machine drifts.
func BenchmarkAllow(b *testing.B) {
	_, prefix := redisproc.New(b)
	tenants := benchTenants(10000)
	admin, _ := benchClient(b)
	ctx := context.Background()
	now := time.Now().UTC()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for _, t := range tenants {
		limitertest.PutSnapshot(b, admin, prefix, limiter.Snapshot{
			TenantID: t, Plan: "bench", Status: "active", Version: 1,
			Rate:        &limiter.Rate{PerSecond: 1000, Burst: 1000},
			Quotas:      map[string]limiter.Quota{limiter.DefaultMeter: {Limit: 1 << 40, Mode: limiter.ModeHard}},
			PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), NextPeriodEnd: start.AddDate(0, 2, 0),
		})
	}
	pick := func(rng *mrand.Rand) string { return tenants[rng.IntN(len(tenants))] }

	ours := func(batching time.Duration) (*limiter.Limiter, *roundTrips) {
		rdb, rt := benchClient(b)
		l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Timeout: time.Second, Batching: batching > 0})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		// Fill the near-cache as in a running backend.
		var wg sync.WaitGroup
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(tenants); i += 32 {
					if _, err := l.Allow(ctx, tenants[i], limiter.Request{Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return l, rt
	}
	decide := func(l *limiter.Limiter) func(ctx context.Context, rng *mrand.Rand) error {
		return func(ctx context.Context, rng *mrand.Rand) error {
			d, err := l.Allow(ctx, pick(rng), limiter.Request{Cost: 1})
			if err != nil {
				return err
			}
			if !d.Allowed || d.Fallback != "" {
				return fmt.Errorf("decision allowed=%v policy=%q fallback=%q", d.Allowed, d.Policy, d.Fallback)
			}
			return nil
		}
	}
	tl, trt := ours(0)
	bl, brt := ours(200 * time.Microsecond) // cmd/bench's window; any value turns natural batching on
	rrdb, rrt := benchClient(b)
	rl := redis_rate.NewLimiter(rrdb)
	lim := redis_rate.PerSecond(1000)
	rr := func(ctx context.Context, rng *mrand.Rand) error {
		res, err := rl.Allow(ctx, prefix+":rr:"+pick(rng), lim)
		if err == nil && res.Allowed != 1 {
			err = fmt.Errorf("redis_rate refused")
		}
		return err
	}
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("g=%d/redis_rate", g), func(b *testing.B) { runBench(b, g, rrt, rr) })
		b.Run(fmt.Sprintf("g=%d/tollgate", g), func(b *testing.B) { runBench(b, g, trt, decide(tl)) })
		b.Run(fmt.Sprintf("g=%d/batching", g), func(b *testing.B) { runBench(b, g, brt, decide(bl)) })
	}
}
