package httpapi

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// With its own Redis hanging (DEBUG SLEEP) and then killed, no request
// waits past the limiter's timeout (+200 ms of slack), the configured fail
// mode decides (open: allowed; closed: 503; local: the in-process bucket),
// nothing answers 500; once Redis is back, decisions come from Redis again
// without a restart.
func TestRedisDownFailModes(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	const timeout = 50 * time.Millisecond
	const slack = 200 * time.Millisecond
	for _, mode := range []limiter.FailMode{limiter.FailOpen, limiter.FailClosed, limiter.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			srv := redistest.StartServer(t, "--enable-debug-command", "yes")
			prefix := redistest.Prefix()
			in := newLimitInstance(t, pool, srv.Addr, prefix, limitSetup{opts: limiter.Options{
				Timeout:  timeout,
				FailMode: limiter.FailModes{Rate: mode, Quota: mode, Concurrency: mode, Window: mode},
			}})
			plan := in.newPlan(t, map[string]any{"per_second": 0.001, "burst": 3},
				map[string]any{"requests": map[string]any{"limit": 1000, "mode": "hard"}})
			tenant, key := in.newTenant(t, plan)
			if r := in.call(t, http.MethodPost, "/v1/check", key, nil); r.status != http.StatusOK {
				t.Fatalf("with Redis up: %d %s", r.status, r.raw)
			}
			check := func(phase string) answer {
				r := in.call(t, http.MethodPost, "/v1/check", key, nil)
				if r.took > timeout+slack {
					t.Fatalf("%s: a request took %v (timeout %v)", phase, r.took, timeout)
				}
				if r.status >= 500 && r.status != http.StatusServiceUnavailable {
					t.Fatalf("%s: %d %s", phase, r.status, r.raw)
				}
				return r
			}

			// Redis hangs: every call must give up at the timeout.
			hang := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer hang.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); hang.Do(context.Background(), "DEBUG", "SLEEP", "1.5") }()
			testkit.Eventually(t, time.Second, "DEBUG SLEEP in effect", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				defer cancel()
				return in.rdb.Ping(ctx).Err() != nil
			})
			for i := 0; i < 3; i++ {
				check("redis hanging")
			}
			wg.Wait()

			// Redis dead.
			srv.Kill()
			var statuses []int
			for i := 0; i < 6; i++ {
				statuses = append(statuses, check("redis killed").status)
			}
			for _, path := range []string{"/v1/entitlements"} {
				r := in.call(t, http.MethodGet, path, key, nil)
				if r.status >= 500 && r.status != http.StatusServiceUnavailable {
					t.Errorf("GET %s with Redis down: %d %s", path, r.status, r.raw)
				}
				t.Logf("GET %s with Redis down: %d in %v", path, r.status, r.took)
				// Reads fall back to Postgres after the entitlements
				// service's short Redis deadline (100 ms) instead of
				// waiting out go-redis's retries.
				if r.took > timeout+100*time.Millisecond+slack {
					t.Errorf("GET %s with Redis down took %v", path, r.took)
				}
			}
			switch mode {
			case limiter.FailOpen:
				for i, s := range statuses {
					if s != http.StatusOK {
						t.Fatalf("open: request %d answered %d, want 200 (statuses %v)", i+1, s, statuses)
					}
				}
			case limiter.FailClosed:
				for i, s := range statuses {
					if s != http.StatusServiceUnavailable {
						t.Fatalf("closed: request %d answered %d, want 503 (statuses %v)", i+1, s, statuses)
					}
				}
			case limiter.FailLocal:
				// The in-process bucket has the plan's burst (3, one
				// expected instance) and refills at 0.001/s; the hanging
				// phase may have taken some of it.
				n200, n429 := 0, 0
				for _, s := range statuses {
					switch s {
					case http.StatusOK:
						n200++
					case http.StatusTooManyRequests:
						n429++
					}
				}
				if n200 > 3 || n429 < 3 || n200+n429 != len(statuses) {
					t.Fatalf("local: statuses %v, want at most 3 allowed by the local bucket, then 429s", statuses)
				}
			}

			// Redis back (empty): decisions come from Redis again, the
			// snapshot reloaded from Postgres.
			srv.Restart(t)
			fresh := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer fresh.Close()
			rateKey := keyspace.Keys{Prefix: prefix}.State(tenant)
			took := testkit.Eventually(t, 5*time.Second, "decisions from Redis after the restart", func() bool {
				r := check("redis back")
				return r.status == http.StatusOK && fresh.Exists(context.Background(), rateKey).Val() == 1
			})
			t.Logf("decisions back on Redis %v after the restart", took)
		})
	}
}
