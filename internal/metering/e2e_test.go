package metering

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// The whole product as an operator runs it: api and worker processes on
// the package database and a Redis of the test's own. A tenant exhausts its
// hard quota through POST /v1/check; the worker flushes; Redis loses
// everything (FLUSHALL) and the api restarts (no in-process cache left);
// the tenant is still refused, and GET /v1/usage shows the same total.
func TestEndToEndHardQuotaSurvivesRedisLoss(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs cmd/api and cmd/worker")
	}
	pgtest.New(t)
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	bins := map[string]string{}
	for _, name := range []string{"api", "worker"} {
		bins[name] = testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/"+name)
	}
	const admin = "tga_e2e_admin_token"
	env := []string{"DATABASE_URL=" + pgtest.URL(t), "REDIS_URL=redis://" + srv.Addr + "/0", "MIGRATE_ON_START=false",
		"HTTP_ADDR=127.0.0.1:0", "ADMIN_TOKEN=" + admin, "FLUSH_INTERVAL=100ms", "LOG_LEVEL=info",
		"STRIPE_SECRET_KEY=", "STRIPE_WEBHOOK_SECRET=", "REDIS_CLUSTER_URL="}
	api := testkit.StartAPI(t, bins["api"], env)
	worker := testkit.StartWorker(t, bins["worker"], env)
	defer worker.Kill()

	plan := "e2e" + randHex(4)
	if st, body := api.Do(t, http.MethodPost, "/admin/v1/plans", admin, map[string]any{"key": plan, "name": plan,
		"quotas": map[string]any{"requests": map[string]any{"limit": 7, "mode": "hard"}}}); st != http.StatusCreated {
		t.Fatalf("create plan: %d %v", st, body)
	}
	st, tn := api.Do(t, http.MethodPost, "/admin/v1/tenants", admin, map[string]any{"name": "E2E", "plan": plan})
	if st != http.StatusCreated {
		t.Fatalf("create tenant: %d %v", st, tn)
	}
	id, _ := tn["id"].(string)
	st, k := api.Do(t, http.MethodPost, "/admin/v1/tenants/"+id+"/api-keys", admin, map[string]any{"name": "e2e"})
	key, _ := k["key"].(string)
	if st != http.StatusCreated || key == "" {
		t.Fatalf("issue key: %d %v", st, k)
	}
	allowed := 0
	for i := 0; i < 10; i++ {
		st, _ := api.Do(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1})
		if st == http.StatusOK {
			allowed++
		} else if st != http.StatusTooManyRequests {
			t.Fatalf("check: %d", st)
		}
	}
	if allowed != 7 {
		t.Fatalf("allowed %d, want the quota of 7", allowed)
	}
	b := newBundle(t, pgtest.New(t), rdb, "tg")
	testkit.Eventually(t, 30*time.Second, "the worker to flush the 7 requests", func() bool {
		return b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = $1 AND meter = 'requests'`, id) == 7
	})

	api.Kill()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	api = testkit.StartAPI(t, bins["api"], env)
	for i := 0; i < 3; i++ {
		if st, body := api.Do(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1}); st != http.StatusTooManyRequests {
			t.Fatalf("check after FLUSHALL and restart: %d %v, want 429", st, body)
		}
	}
	st, u := api.Do(t, http.MethodGet, "/v1/usage", key, nil)
	ms, _ := u["meters"].([]any)
	if st != http.StatusOK || len(ms) != 1 || ms[0].(map[string]any)["used"] != 7.0 {
		t.Fatalf("usage after FLUSHALL: %d %v", st, u)
	}
	// Nothing was admitted after the loss, so nothing is pending in Redis
	// that a flush could add.
	if keys, _ := rdb.Keys(context.Background(), "tg:{t:"+id+"}:q[pf]:*").Result(); len(keys) != 0 {
		t.Fatalf("pending usage after the refusals: %v", keys)
	}
	if n := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = $1 AND meter = 'requests'`, id); n != 7 {
		t.Fatalf("durable requests after FLUSHALL = %d, want 7", n)
	}
}
