package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
)

// In the local fail mode a hard quota is held to what Redis last said was
// left: an exhausted tenant stays refused through a Redis death (with or
// without the refusal cache, which must survive the lost subscription), one
// with 4 left gets 4 / 2 instances = 2, and decisions return to Redis
// when it is back.
func TestLocalModeHoldsQuotasThroughRedisDeath(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("refusal cache %v", cache), func(t *testing.T) {
			srv := startPrivate(t)
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			st := newStore(rdb, "")
			snaps := map[string]limiter.Snapshot{}
			for _, tenant := range []string{"spent", "little"} {
				s := snapshot(tenant, func(s *limiter.Snapshot) {
					s.Quotas = map[string]limiter.Quota{"requests": {Limit: 10, Mode: limiter.ModeHard}}
				})
				snaps[tenant] = s
				put(t, st, s)
			}
			var durable, littleDurable atomic.Int64
			var lost atomic.Int64
			l := newLimiter(t, rdb, limiter.Options{
				Timeout: 50 * time.Millisecond, Cooldown: 20 * time.Millisecond, ExpectedInstances: 2,
				FailMode:            limiter.FailModes{Rate: limiter.FailLocal, Quota: limiter.FailLocal},
				DisableRefusalCache: !cache,
				Loader: func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
					s, ok := snaps[tenant]
					if !ok {
						return limiter.Snapshot{}, limiter.ErrUnknownTenant
					}
					return s, st.PutSnapshot(ctx, s)
				},
				UsageLoader: func(ctx context.Context, tenant, meter string, start time.Time) (int64, error) {
					if tenant == "spent" {
						return durable.Load(), nil
					}
					return littleDurable.Load(), nil
				},
				Hooks: limiter.Hooks{OnInvalidation: func(tenant string, all bool) {
					if all {
						lost.Add(1)
					}
				}},
			})
			allow := func(tenant string) *limiter.Decision {
				t.Helper()
				d, err := l.Allow(ctx, tenant, limiter.Request{Cost: 1, Meter: "requests"})
				if err != nil {
					t.Fatalf("%s: %v", tenant, err)
				}
				return d
			}
			for i := 0; i < 11; i++ {
				allow("spent")
			}
			durable.Store(10)
			for i := 0; i < 6; i++ {
				if d := allow("little"); !d.Allowed {
					t.Fatalf("little #%d refused: %+v", i, d)
				}
			}
			littleDurable.Store(6)
			if d := allow("spent"); d.Allowed {
				t.Fatalf("spent admitted before the outage: %+v", d)
			}
			before := lost.Load()
			srv.Kill()
			// The subscription notices the death (and drops the near-cache).
			little := 0
			limitertest.Eventually(t, 15*time.Second, "subscription lost", func() bool {
				if allow("little").Allowed { // Redis is dead: decided locally
					little++
				}
				return lost.Load() > before
			})
			admitted := 0
			for i := 0; i < 50; i++ {
				if allow("spent").Allowed {
					admitted++
				}
			}
			if admitted != 0 {
				t.Fatalf("exhausted tenant admitted %d of 50 with Redis dead", admitted)
			}
			// "little" had 4 left: 2 for this instance, whether the poll
			// above spent them or the loop below.
			for i := 0; i < 50; i++ {
				d := allow("little")
				if d.Fallback != limiter.FailLocal {
					t.Fatalf("little decided without the local mode: %+v", d)
				}
				if d.Allowed {
					little++
				}
			}
			if little != 2 {
				t.Fatalf("little: %d admitted in the outage, want 4 left / 2 instances", little)
			}
			srv.Restart(t)
			left := int64(-1)
			limitertest.Eventually(t, 10*time.Second, "decisions back on Redis", func() bool {
				d, err := l.Allow(ctx, "little", limiter.Request{Cost: 1, Meter: "requests"})
				if err != nil || d.Fallback != "" {
					return false
				}
				for _, p := range d.Policies {
					if p.Name == "requests" {
						left = p.Remaining
					}
				}
				return true
			})
			// Back on Redis: "little" is rebuilt from 6 durable and has 4,
			// less what the poll took: its successful decision one, and a
			// poll Redis answered after the 50 ms timeout (a loaded
			// machine) may have taken one more while deciding locally.
			if left < 0 || left > 3 {
				t.Fatalf("little after the outage: %d left after the poll, want at most 3 of 4", left)
			}
			got := 0
			for i := 0; i < 10; i++ {
				if allow("little").Allowed {
					got++
				}
			}
			if int64(got) != left {
				t.Fatalf("little after the outage: %d admitted, want the %d Redis said were left", got, left)
			}
			if d := allow("spent"); d.Allowed || d.Fallback != "" {
				t.Fatalf("spent after the outage: %+v", d)
			}
		})
	}
}

// A budget held locally: 4 left and 2 instances give exactly 2.
func TestLocalModeQuotaBudgetIsLeftOverInstances(t *testing.T) {
	srv, rdb, st, s := privateQuota(t, "little", 10)
	ctx := context.Background()
	l := newLimiter(t, rdb, limiter.Options{
		Timeout: 50 * time.Millisecond, Cooldown: time.Hour, ExpectedInstances: 2,
		FailMode: limiter.FailModes{Quota: limiter.FailLocal},
	})
	for i, tries := 0, 0; i < 6; tries++ {
		d, err := l.Allow(ctx, "little", limiter.Request{Cost: 1, Meter: "requests"})
		if errors.Is(err, limiter.ErrUnavailable) && tries < 100 {
			// Lost on a starved machine (50 ms): nothing taken, or a late
			// take given back; the client retries.
			continue
		}
		if err != nil || !d.Allowed {
			t.Fatalf("#%d %+v %v", i, d, err)
		}
		i++
	}
	// A late take's refund reaches Redis within a flush: the budget is
	// what is left of 6 admitted.
	limitertest.Eventually(t, 10*time.Second, "Redis counting the 6 admitted", func() bool {
		_ = limiter.FlushRefusals(l, ctx)
		used, _, err := st.Used(ctx, "little", "requests", s.PeriodStart)
		return err == nil && used == 6
	})
	srv.Kill()
	admitted := 0
	for i := 0; i < 20; i++ {
		d, err := l.Allow(ctx, "little", limiter.Request{Cost: 1, Meter: "requests"})
		if err != nil || d.Fallback != limiter.FailLocal {
			t.Fatalf("%+v %v", d, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d with 4 left over 2 instances, want 2", admitted)
	}
}

// Never a free reset: a counter that cannot be rebuilt (the UsageLoader
// fails) is decided by the quota's fail mode and no counter is written;
// once the loader answers, the counter is rebuilt from the durable figure.
func TestUnbuiltCounterIsNoFreeReset(t *testing.T) {
	for _, mode := range []limiter.FailMode{limiter.FailLocal, limiter.FailClosed, limiter.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			b := singleRedis(t)
			ctx := context.Background()
			rdb := b.client()
			st := newStore(rdb, b.prefix)
			s := snapshot("hard", func(s *limiter.Snapshot) {
				s.Quotas = map[string]limiter.Quota{"exports": {Limit: 50, Mode: limiter.ModeHard}}
			})
			put(t, st, s)
			var durable atomic.Int64
			var failing atomic.Bool
			// Redis answers throughout (only the UsageLoader fails): a
			// generous timeout, so that a loaded CI machine does not turn
			// a slow answer into a fail-mode decision.
			l := newLimiter(t, rdb, limiter.Options{
				Prefix: b.prefix, DisableRefusalCache: true, Timeout: 5 * time.Second,
				FailMode: limiter.FailModes{Quota: mode},
				UsageLoader: func(ctx context.Context, tenant, meter string, start time.Time) (int64, error) {
					if failing.Load() {
						return 0, errors.New("postgres is down")
					}
					return durable.Load(), nil
				},
			})
			req := limiter.Request{Cost: 1, Meter: "exports"}
			for i := 0; i < 50; i++ {
				if d, err := l.Allow(ctx, "hard", req); err != nil || !d.Allowed {
					t.Fatalf("#%d %+v %v", i, d, err)
				}
			}
			// Flushed to Postgres; then Redis loses the counter while
			// Postgres is down.
			durable.Store(50)
			failing.Store(true)
			k := keyspace.Keys{Prefix: b.prefix}
			rdb.Del(ctx, k.State("hard"))
			admitted := 0
			for i := 0; i < 50; i++ {
				d, err := l.Allow(ctx, "hard", req)
				switch mode {
				case limiter.FailClosed:
					if !errors.Is(err, limiter.ErrUnavailable) {
						t.Fatalf("closed: %+v %v", d, err)
					}
					continue
				default:
					if err != nil || d.Fallback == "" {
						t.Fatalf("%s: %+v %v", mode, d, err)
					}
				}
				if d.Allowed {
					admitted++
				}
			}
			if n, _ := rdb.HExists(ctx, k.State("hard"), keyspace.CounterOf("exports", s.PeriodStart).Used()).Result(); n {
				t.Fatalf("a counter was written without its rebuild")
			}
			want := 0
			if mode == limiter.FailOpen {
				want = 50 // open admits, by its definition, but counts nothing
			}
			if admitted != want {
				t.Fatalf("%s: exhausted tenant admitted %d of 50 with the counter unbuilt, want %d", mode, admitted, want)
			}
			failing.Store(false)
			d, err := l.Allow(ctx, "hard", req)
			if err != nil || d.Allowed || d.Fallback != "" || d.Policy != "exports" {
				t.Fatalf("loader back: %+v %v", d, err)
			}
			if used, _, _ := st.Used(ctx, "hard", "exports", s.PeriodStart); used != 50 {
				t.Fatalf("rebuilt counter %d, want the durable 50", used)
			}
		})
	}
}

// The refusal cache survives a lost subscription: even with a quota that
// fails open, an exhausted tenant refused before Redis died stays refused
// until its retry time (only invalidations, or a new subscription with
// Redis answering again, clear it).
func TestRefusalCacheSurvivesLostSubscription(t *testing.T) {
	srv := startPrivate(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	st := newStore(rdb, "")
	put(t, st, snapshot("spent", func(s *limiter.Snapshot) {
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 3, Mode: limiter.ModeHard}}
	}))
	var lost atomic.Int64
	l := newLimiter(t, rdb, limiter.Options{
		Timeout: 50 * time.Millisecond, Cooldown: 20 * time.Millisecond,
		FailMode: limiter.FailModes{Quota: limiter.FailOpen},
		Hooks: limiter.Hooks{OnInvalidation: func(tenant string, all bool) {
			if all {
				lost.Add(1)
			}
		}},
	})
	req := limiter.Request{Cost: 1, Meter: "requests"}
	for i := 0; i < 4; i++ {
		if _, err := l.Allow(ctx, "spent", req); err != nil {
			t.Fatal(err)
		}
	}
	before := lost.Load()
	srv.Kill()
	limitertest.Eventually(t, 15*time.Second, "subscription lost", func() bool { return lost.Load() > before })
	for i := 0; i < 50; i++ {
		d, err := l.Allow(ctx, "spent", req)
		if err != nil || d.Allowed {
			t.Fatalf("#%d after the subscription's loss: %+v %v", i, d, err)
		}
	}
}

// The local fail mode admits a tenant with grants up to what Redis last
// said was left, grants included; once Redis answers again the units it
// admitted are drawn from the grants as a decision would draw them, so
// that none is given twice: over the whole run the tenant gets at most
// its included 10 and its grant's 20, and Redis's counter holds every
// unit admitted. (Without the draw the grant kept its 20 and Redis gave
// them again after the outage.)
func TestLocalModeDrawsGrantsAfterwards(t *testing.T) {
	srv := startPrivate(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	st := newStore(rdb, "")
	s := snapshot("granted", hardQuota(10, limiter.ModeHard))
	put(t, st, s)
	putGrants(t, st, "granted", grant("gl", 20))
	l := newLimiter(t, rdb, limiter.Options{
		Timeout: 50 * time.Millisecond, Cooldown: 20 * time.Millisecond, ExpectedInstances: 1,
		FailMode: limiter.FailModes{Rate: limiter.FailLocal, Quota: limiter.FailLocal},
		Loader: func(ctx context.Context, tenant string) (limiter.Snapshot, error) {
			_ = st.PutSnapshot(ctx, s) // the server's loader writes it back, when Redis answers
			return s, nil
		},
	})
	admitted := int64(0)
	allow := func(cost int64) *limiter.Decision {
		t.Helper()
		d, err := l.Allow(ctx, "granted", limiter.Request{Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted += cost
		}
		return d
	}
	if d := allow(5); !d.Allowed || d.Fallback != "" {
		t.Fatalf("before the outage: %+v", d)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = srv.Signal(syscall.SIGCONT)
		}
	})
	local, lost := int64(0), int64(0)
	for i := 0; i < 60; i++ {
		d, err := l.Allow(ctx, "granted", limiter.Request{Cost: 1})
		if errors.Is(err, limiter.ErrUnavailable) {
			lost++ // a hang is told from a stall only once failures keep on
			continue
		}
		if err != nil || d.Fallback != limiter.FailLocal {
			t.Fatalf("Redis stopped: %+v, %v", d, err)
		}
		if d.Allowed {
			admitted++
			local++
		}
	}
	if local == 0 || local > 25 {
		t.Fatalf("admitted %d locally, want some and at most the 25 Redis said were left", local)
	}
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// The charges' flush adds the local admissions to Redis's counter and
	// takes what went beyond the included 10 out of the grant.
	var used int64
	limitertest.Eventually(t, 20*time.Second, "the local admissions reach Redis", func() bool {
		used, _, _ = st.Used(ctx, "granted", "requests", s.PeriodStart)
		return used >= admitted
	})
	// A lost call Redis ran once it woke took a unit nobody was told of
	// (given back when its late answer is reconciled): at most one each.
	if used-admitted > lost {
		t.Fatalf("counter %d, admitted %d, %d calls lost", used, admitted, lost)
	}
	if left := grantLeft(t, st, "granted", "gl"); left != max(0, 20-(used-10)) {
		t.Fatalf("grant left %d with a counter of %d, want %d", left, used, max(0, 20-(used-10)))
	}
	// Back on Redis, the tenant gets what is left, if anything, then is
	// refused.
	limitertest.Eventually(t, 20*time.Second, "Redis refuses the tenant", func() bool {
		d, err := l.Allow(ctx, "granted", limiter.Request{Cost: 1})
		if err != nil {
			return false
		}
		if d.Allowed {
			admitted++
		}
		return !d.Allowed && d.Fallback == ""
	})
	if admitted != 30 {
		t.Fatalf("admitted %d in all (%d locally), want 10 included + 20 granted: grant units given twice, or lost", admitted, local)
	}
	t.Logf("admitted %d (%d locally), counter %d", admitted, local, used)
}
