package notify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// The exactly-once as an operator deploys it: two cmd/api
// processes take 1,000 concurrent POST /v1/check of one tenant (a hard
// quota of 500), two cmd/worker processes flush and deliver. The 80% and
// 100% crossings and the quota's first refusal each reach the receiver
// exactly once (one webhook-id, one request), signed as Standard Webhooks'
// own library verifies, and the api processes admitted exactly 500. The
// in-process test beside it (TestQuotaThresholdsExactlyOnceAcrossTwoFlushers)
// shares one Go runtime between the instances; here nothing is shared but
// Postgres and Redis.
func TestThresholdsExactlyOnceAcrossAPIAndWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cmd/api and cmd/worker")
	}
	db := pgtest.New(t)
	ctx := context.Background()
	// Other tests' endpoints would get this test's events (and the other way round).
	if _, err := db.Exec(ctx, `TRUNCATE webhook_endpoints, webhook_events CASCADE`); err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartServer(t)
	apiBin := testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/api")
	workerBin := testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")
	const admin = "tga_notify_processes_admin"
	env := []string{"DATABASE_URL=" + pgtest.URL(t), "REDIS_URL=redis://" + srv.Addr + "/0", "MIGRATE_ON_START=false",
		"HTTP_ADDR=127.0.0.1:0", "ADMIN_TOKEN=" + admin, "FLUSH_INTERVAL=100ms", "LOG_LEVEL=info",
		"STRIPE_SECRET_KEY=", "STRIPE_WEBHOOK_SECRET=", "REDIS_CLUSTER_URL=",
		"WEBHOOK_ALLOW_HTTP=true", "WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_RETRY_BACKOFF=200ms,200ms,200ms",
		"WEBHOOK_SECRET_KEY=" + base64.StdEncoding.EncodeToString(testKey),
		"METRICS_ADDR=127.0.0.1:0", "WORKER_METRICS_ADDR=off",
		// What is tested is notification, not the fail mode: a burst of
		// 1,000 on two loaded cores must not time decisions out into local
		// mode, whose limit per instance is another test's subject.
		"LIMITER_TIMEOUT=10s"}
	apis := []*testkit.Proc{testkit.StartAPI(t, apiBin, env), testkit.StartAPI(t, apiBin, env)}
	for range 2 {
		testkit.StartWorker(t, workerBin, env)
	}

	plan := fmt.Sprintf("procs%d", time.Now().UnixNano())
	if st, body := apis[0].Do(t, http.MethodPost, "/admin/v1/plans", admin, map[string]any{"key": plan, "name": plan,
		"quotas": map[string]any{"requests": map[string]any{"limit": 500, "mode": "hard"}}}); st != http.StatusCreated {
		t.Fatalf("create plan: %d %v", st, body)
	}
	st, tn := apis[0].Do(t, http.MethodPost, "/admin/v1/tenants", admin, map[string]any{"name": "Procs", "plan": plan})
	if st != http.StatusCreated {
		t.Fatalf("create tenant: %d %v", st, tn)
	}
	tenant, _ := tn["id"].(string)
	st, k := apis[1].Do(t, http.MethodPost, "/admin/v1/tenants/"+tenant+"/api-keys", admin, map[string]any{"name": "procs"})
	key, _ := k["key"].(string)
	if st != http.StatusCreated || key == "" {
		t.Fatalf("issue key: %d %v", st, k)
	}
	r := newReceiver(t)
	st, ep := apis[1].Do(t, http.MethodPost, "/admin/v1/webhook-endpoints", admin, map[string]any{"url": r.srv.URL,
		"events": []string{TypeQuotaThreshold, TypeQuotaExhausted}})
	secret, _ := ep["secret"].(string)
	if st != http.StatusCreated || secret == "" {
		t.Fatalf("create endpoint: %d %v", st, ep)
	}

	// 1,000 decisions released at once, alternating between the two apis.
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	startGun := make(chan struct{})
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGun
			// A 503 (the adaptive overload guard shedding the burst) took
			// nothing: a client tries that decision again, as ours does.
			st, body, err := apis[i%2].Request(http.MethodPost, "/v1/check", key, map[string]any{"cost": 1})
			for try := 0; err == nil && st == http.StatusServiceUnavailable && try < 200; try++ {
				time.Sleep(time.Duration(10+i%40) * time.Millisecond)
				st, body, err = apis[i%2].Request(http.MethodPost, "/v1/check", key, map[string]any{"cost": 1})
			}
			switch {
			case err != nil:
				errs <- err
			case st == http.StatusOK:
				admitted.Add(1)
			case st == http.StatusTooManyRequests:
				refused.Add(1)
			default:
				errs <- fmt.Errorf("check: %d %v", st, body)
			}
		}()
	}
	close(startGun)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if admitted.Load() != 500 || refused.Load() != 500 {
		t.Fatalf("admitted %d, refused %d of 1000 against a hard quota of 500", admitted.Load(), refused.Load())
	}

	// Everything flushed and every event delivered: then nothing more may come.
	testkit.Eventually(t, 90*time.Second, "usage flushed and the three events delivered", func() bool {
		var used, events, open int64
		_ = db.QueryRow(ctx, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = $1 AND meter = 'requests'`, tenant).Scan(&used)
		_ = db.QueryRow(ctx, `SELECT count(*) FROM webhook_events`).Scan(&events)
		_ = db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&open)
		return used == 500 && events == 3 && open == 0 && len(r.requests()) >= 3
	})
	// Two more flush passes of both workers after the last delivery: a
	// second flusher finding a crossing again would show up here.
	before := time.Now()
	testkit.Eventually(t, 30*time.Second, "two more flush intervals", func() bool {
		return time.Since(before) > 2*100*time.Millisecond*5
	})

	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{} // "type threshold" → requests
	ids := map[string]string{}
	for _, g := range r.requests() {
		if err := wh.Verify(g.body, g.header); err != nil {
			t.Fatalf("delivery does not verify with standard-webhooks: %v", err)
		}
		var ev struct {
			Type string
			Data struct {
				TenantID  string `json:"tenant_id"`
				Threshold struct{ Percent int }
				Used      int64
				Limit     int64
			}
		}
		if err := json.Unmarshal(g.body, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Data.TenantID != tenant {
			t.Fatalf("event of another tenant: %s", g.body)
		}
		name := ev.Type
		if ev.Type == TypeQuotaThreshold {
			name = fmt.Sprintf("%s %d%%", ev.Type, ev.Data.Threshold.Percent)
			if ev.Data.Limit != 500 || ev.Data.Used < int64(5*ev.Data.Threshold.Percent) {
				t.Errorf("%s: used %d of %d", name, ev.Data.Used, ev.Data.Limit)
			}
		}
		got[name]++
		ids[name] = g.header.Get("webhook-id")
	}
	want := []string{TypeQuotaThreshold + " 80%", TypeQuotaThreshold + " 100%", TypeQuotaExhausted}
	for _, name := range want {
		if got[name] != 1 {
			t.Errorf("%s delivered %d times, want exactly once (all: %v)", name, got[name], got)
		}
	}
	if len(got) != len(want) || len(r.requests()) != len(want) {
		t.Errorf("deliveries %v (%d requests), want one each of %v", got, len(r.requests()), want)
	}
	if ids[want[0]] == ids[want[1]] {
		t.Errorf("the two crossings share webhook-id %q", ids[want[0]])
	}
}
