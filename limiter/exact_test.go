package limiter_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

const (
	numLimiters = 4
	numCallers  = 200
)

// fleet is numLimiters Limiters, each on its own client, sharing a prefix.
func fleet(t *testing.T, b *backend, opts limiter.Options) ([]*limiter.Limiter, *store) {
	t.Helper()
	opts.Prefix = b.prefix
	ls := make([]*limiter.Limiter, numLimiters)
	for i := range ls {
		ls[i] = newLimiter(t, b.client(), opts)
	}
	return ls, newStore(b.client(), b.prefix)
}

// hammer runs numCallers goroutines, each calling f calls times with a
// limiter picked round robin, and returns once all are done.
func hammer(ls []*limiter.Limiter, calls int, f func(l *limiter.Limiter, caller, call int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := 0; c < numCallers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < calls; i++ {
				f(ls[(c+i)%len(ls)], c, i)
			}
		}()
	}
	close(start)
	wg.Wait()
}

func TestExactness(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ls, st := fleet(t, b, limiter.Options{Timeout: 2 * time.Second})
		ctx := context.Background()

		t.Run("burst", func(t *testing.T) {
			const burst = 37
			put(t, st, snapshot("burst", func(s *limiter.Snapshot) { s.Rate = &limiter.Rate{PerSecond: 0.001, Burst: burst} }))
			var admitted atomic.Int64
			hammer(ls, 1, func(l *limiter.Limiter, _, _ int) {
				d, err := l.Allow(ctx, "burst", limiter.Request{Cost: 1, SkipQuota: true})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else if d.Policy != limiter.PolicyRate || d.RetryAfter <= 0 {
					t.Errorf("refusal %+v", d)
				}
			})
			if got := admitted.Load(); got != burst {
				t.Fatalf("admitted %d of %d, want exactly the burst %d", got, numCallers, burst)
			}
		})

		t.Run("hard quota", func(t *testing.T) {
			const q = 151
			s := snapshot("quota", func(s *limiter.Snapshot) {
				s.Quotas = map[string]limiter.Quota{"requests": {Limit: q, Mode: limiter.ModeHard}}
			})
			put(t, st, s)
			var admitted atomic.Int64
			hammer(ls, 3, func(l *limiter.Limiter, _, _ int) {
				d, err := l.Allow(ctx, "quota", limiter.Request{Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else if d.Policy != "requests" {
					t.Errorf("refused by %q", d.Policy)
				}
			})
			if got := admitted.Load(); got != q {
				t.Fatalf("admitted %d, want exactly %d", got, q)
			}
			// Refused requests consumed nothing: the counter is exactly Q.
			used, ok, err := st.Used(ctx, "quota", "requests", s.PeriodStart)
			if err != nil || !ok || used != q {
				t.Fatalf("Used = %d, %v, %v; want %d", used, ok, err, q)
			}
		})

		t.Run("cost weighted", func(t *testing.T) {
			const q = 1000
			const burst = 700
			s := snapshot("cost", func(s *limiter.Snapshot) {
				s.Rate = &limiter.Rate{PerSecond: 0.001, Burst: burst}
				s.Quotas = map[string]limiter.Quota{"tokens": {Limit: q, Mode: limiter.ModeHard}}
			})
			put(t, st, s)
			var sum, tokens atomic.Int64
			hammer(ls, 3, func(l *limiter.Limiter, c, i int) {
				cost := int64(1 + (c*7+i*3)%9)
				meter, skip := "tokens", (c+i)%2 == 0
				d, err := l.Allow(ctx, "cost", limiter.Request{Cost: cost, Meter: meter, SkipQuota: skip})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					tokens.Add(cost)
					if !skip {
						sum.Add(cost)
					}
				}
			})
			used, _, err := st.Used(ctx, "cost", "tokens", s.PeriodStart)
			if err != nil || used != sum.Load() || used > q {
				t.Fatalf("quota counter %d (%v), admitted cost %d, limit %d", used, err, sum.Load(), q)
			}
			if tokens.Load() > burst {
				t.Fatalf("%d tokens admitted from a bucket of %d", tokens.Load(), burst)
			}
			// A peek reports what is left: the bucket minus exactly what was admitted.
			d, err := ls[0].Allow(ctx, "cost", limiter.Request{Peek: true, SkipQuota: true})
			if err != nil {
				t.Fatal(err)
			}
			if rem := d.Policies[0].Remaining; rem != burst-tokens.Load() {
				t.Fatalf("remaining %d, want %d - %d", rem, burst, tokens.Load())
			}
		})

		t.Run("concurrency", func(t *testing.T) {
			const c = 7
			put(t, st, snapshot("conc", func(s *limiter.Snapshot) { s.Concurrency = c }))
			var holders, maxHolders, admitted atomic.Int64
			hammer(ls, 5, func(l *limiter.Limiter, _, _ int) {
				d, err := l.Allow(ctx, "conc", limiter.Request{Cost: 1, Concurrency: true})
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					if d.Policy != limiter.PolicyConcurrency {
						t.Errorf("refused by %q", d.Policy)
					}
					return
				}
				admitted.Add(1)
				n := holders.Add(1)
				for {
					m := maxHolders.Load()
					if n <= m || maxHolders.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // hold the slot a while
				holders.Add(-1)
				if err := d.Release(ctx); err != nil {
					t.Error(err)
				}
				if err := d.Release(ctx); err != nil { // twice is a no-op
					t.Error(err)
				}
			})
			if m := maxHolders.Load(); m > c || m < 1 || admitted.Load() < c {
				t.Fatalf("max holders %d (limit %d), admitted %d", m, c, admitted.Load())
			}
			// Every slot came back.
			d, err := ls[0].Allow(ctx, "conc", limiter.Request{Peek: true, Concurrency: true})
			if err != nil || !d.Allowed || d.Policies[0].Remaining != c {
				t.Fatalf("after release: %+v %v", d, err)
			}
		})
	})
}
