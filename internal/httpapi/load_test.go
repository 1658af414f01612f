package httpapi

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// The limiter as cmd/api sets it up by default: LIMITER_TIMEOUT 50ms, fail
// mode local for every policy, EXPECTED_INSTANCES 1, the adaptive
// concurrency limit on.
func defaultLimiterOptions() limiter.Options {
	local := limiter.FailLocal
	return limiter.Options{
		Timeout:             50 * time.Millisecond,
		FailMode:            limiter.FailModes{Rate: local, Quota: local, Concurrency: local, Window: local},
		ExpectedInstances:   1,
		AdaptiveConcurrency: true,
	}
}

// checkUntilAnswered sends POST /v1/check until it is answered with
// something else than a 503 (a shed or unavailable decision, which
// takes nothing: the client may retry), and returns that status.
func checkUntilAnswered(t *testing.T, in *limitInstance, key string, body any) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		r := in.call(t, http.MethodPost, "/v1/check", key, body)
		if r.status != http.StatusServiceUnavailable {
			return r.status
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After: %s", r.raw)
		}
		if time.Now().After(deadline) {
			t.Errorf("still 503 after %d tries: %s", i+1, r.raw)
			return r.status
		}
		time.Sleep(time.Duration(20+(i%4)*10) * time.Millisecond) // a client's backoff
	}
}

// exactUnderLoad runs the three scenarios against two instances:
// a burst of 200 across both on a fresh tenant (never more than the burst
// plus its refill), a hard quota of 30 under 100 concurrent requests
// (exactly 30 once retries stop), and a cost of 7 sent 5 times one after
// another on a hard 30 (4 admitted, then refused).
func exactUnderLoad(t *testing.T, ins []*limitInstance) {
	admin := ins[0]
	// Instances that have served before (their Redis connections open):
	// the tenants below are fresh, the instances are not.
	warm := admin.newPlan(t, map[string]any{"per_second": 1e6, "burst": 1e6}, nil)
	_, warmKey := admin.newTenant(t, warm)
	var wwg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wwg.Add(1)
		go func() { defer wwg.Done(); checkUntilAnswered(t, ins[i%len(ins)], warmKey, nil) }()
	}
	wwg.Wait()
	defer func() {
		for i, in := range ins {
			t.Logf("instance %d: %v fallbacks, %v Redis errors, %v shed", i, counterSum(t, in.reg, "tollgate_limiter_fallbacks_total"),
				counterSum(t, in.reg, "tollgate_limiter_redis_errors_total"), counterSum(t, in.reg, "tollgate_http_overloaded_total"))
		}
	}()
	t.Run("burst of 200 across two instances", func(t *testing.T) {
		const burst, perSecond = 20, 1.0
		plan := admin.newPlan(t, map[string]any{"per_second": perSecond, "burst": burst}, nil)
		_, key := admin.newTenant(t, plan)
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		gate := make(chan struct{})
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				switch s := checkUntilAnswered(t, ins[i%len(ins)], key, nil); s {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("status %d", s)
				}
			}()
		}
		close(gate)
		wg.Wait()
		refill := int64(time.Since(start).Seconds()*perSecond) + 1
		t.Logf("admitted %d, refused %d in %v", admitted.Load(), refused.Load(), time.Since(start))
		if a := admitted.Load(); a > burst+refill || a < 1 {
			t.Errorf("admitted %d of 200, want at most the burst %d plus its refill %d", a, burst, refill)
		}
	})
	t.Run("hard quota of 30 under 100 concurrent", func(t *testing.T) {
		plan := admin.newPlan(t, nil, map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}})
		_, key := admin.newTenant(t, plan)
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i := 0; i < 100; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				switch s := checkUntilAnswered(t, ins[i%len(ins)], key, nil); s {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("status %d", s)
				}
			}()
		}
		close(gate)
		wg.Wait()
		t.Logf("admitted %d, refused %d", admitted.Load(), refused.Load())
		if a := admitted.Load(); a != 30 {
			t.Errorf("admitted %d of 100 on a hard quota of 30, want exactly 30", a)
		}
	})
	t.Run("cost 7 five times on a hard 30", func(t *testing.T) {
		plan := admin.newPlan(t, nil, map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}})
		_, key := admin.newTenant(t, plan)
		admitted := 0
		for i := 0; i < 6; i++ {
			s := checkUntilAnswered(t, ins[i%len(ins)], key, map[string]any{"cost": 7})
			if s == http.StatusOK {
				admitted++
			} else if s != http.StatusTooManyRequests {
				t.Errorf("#%d: status %d", i, s)
			}
			if i < 4 && s != http.StatusOK {
				t.Errorf("#%d (%d of 30 used): status %d, want 200", i, 7*i, s)
			}
		}
		if admitted != 4 {
			t.Errorf("admitted %d of 6 checks of cost 7 on a hard 30, want 4 (28 units)", admitted)
		}
	})
}

func twoInstances(t *testing.T, pool *pgxpool.Pool, addr, prefix string) []*limitInstance {
	t.Helper()
	return []*limitInstance{
		newLimitInstance(t, pool, addr, prefix, limitSetup{opts: defaultLimiterOptions()}),
		newLimitInstance(t, pool, addr, prefix, limitSetup{opts: defaultLimiterOptions()}),
	}
}

// (a) CPU-starved: the process runs on one P beside goroutines that burn
// it (bounded to the test, and to one core of the shared machine), with
// the default LIMITER_TIMEOUT.
func TestExactWhileCPUStarved(t *testing.T) {
	// Not parallel: it measures exactness under load, which other tests
	// of the package would add to.
	pool := pgtest.New(t)
	srv := redistest.StartServer(t) // see TestExactWithRedisFarAway
	ins := twoInstances(t, pool, srv.Addr, redistest.Prefix())
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	ctx, stop := context.WithCancel(context.Background())
	var burners sync.WaitGroup
	for i := 0; i < 4; i++ {
		burners.Add(1)
		go func() {
			defer burners.Done()
			x := 0
			for ctx.Err() == nil {
				for j := 0; j < 1e5; j++ {
					x += j
				}
			}
			_ = x
		}()
	}
	defer func() { stop(); burners.Wait() }()
	exactUnderLoad(t, ins)
}

// (b) Redis 20 ms away each way behind a proxy, with the default
// LIMITER_TIMEOUT of 50 ms: every round trip takes 40 ms or more.
func TestExactWithRedisFarAway(t *testing.T) {
	// Not parallel: it measures exactness under load, which other tests
	// of the package would add to.
	pool := pgtest.New(t)
	// A Redis of its own: the shared one's pauses (other packages' tests)
	// must not pass for this test's latency.
	srv := redistest.StartServer(t)
	proxy := redistest.StartDelayProxy(t, srv.Addr, 20*time.Millisecond)
	ins := twoInstances(t, pool, proxy.Addr, redistest.Prefix())
	exactUnderLoad(t, ins)
}

// (c) Redis refusing connections: a hard-quota tenant the instance has
// never seen is decided from its real limits (the Postgres loader) and
// durable usage, promptly: an exhausted one is refused, one with room is
// held to what is left, never admitted unlimited.
func TestUnseenTenantWithRedisRefusing(t *testing.T) {
	// Not parallel: it measures exactness under load, which other tests
	// of the package would add to.
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	admin := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{opts: limiter.Options{}})
	plan := admin.newPlan(t, nil, map[string]any{"requests": map[string]any{"limit": 30, "mode": "hard"}})
	spentID, spent := admin.newTenant(t, plan)
	roomID, room := admin.newTenant(t, plan)
	now := time.Now().UTC().Format(time.RFC3339)
	for _, u := range []struct {
		key string
		n   int
	}{{spent, 30}, {room, 24}} {
		r := admin.call(t, http.MethodPost, "/v1/usage/events", u.key, map[string]any{"events": []any{
			map[string]any{"id": randName("ev-"), "meter": "requests", "quantity": u.n, "timestamp": now}}})
		if r.status != http.StatusOK {
			t.Fatalf("usage events: %d %s", r.status, r.raw)
		}
	}
	// The durable figures the instance will have to go by.
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(pool, store, nil, entitlements.Options{})
	meter := metering.NewService(pool, store, nil, metering.Options{Snapshot: ents.CachedSnapshot})
	for id, want := range map[string]int64{spentID: 30, roomID: 24} {
		snap, err := ents.ReloadSnapshot(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if used, err := meter.LoadUsage(context.Background(), id, "requests", snap.PeriodStart); err != nil || used != want {
			t.Fatalf("durable usage of %s: %d %v, want %d", id, used, err, want)
		}
	}

	cut := newTCPCut(t, redisAddr(t, rdb))
	cut.down() // refused from the start: this instance never saw either tenant in Redis
	in := newLimitInstance(t, pool, cut.addr, prefix, limitSetup{opts: defaultLimiterOptions()})
	// The API key is authenticated from Postgres; only the limiter's
	// Redis is gone.
	for i := 0; i < 20; i++ {
		r := in.call(t, http.MethodPost, "/v1/check", spent, nil)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("exhausted tenant, check #%d with Redis refusing: %d %s, want 429", i, r.status, r.raw)
		}
		if r.took > 2*time.Second {
			t.Errorf("check #%d took %v", i, r.took)
		}
	}
	admitted := 0
	for i := 0; i < 20; i++ {
		r := in.call(t, http.MethodPost, "/v1/check", room, nil)
		switch r.status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("tenant with 6 left, check #%d: %d %s", i, r.status, r.raw)
		}
	}
	if admitted != 6 {
		t.Fatalf("tenant with 6 of 30 left admitted %d of 20 with Redis refusing, want 6", admitted)
	}
}
