package limiter_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

var (
	clusterOnce sync.Once
	cluster     *redistest.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The examples connect to localhost:6379 as written in the docs. Without
	// a Redis there they are skipped (a failure when CI is set), never run
	// into a panic.
	// LIMITER_EXAMPLES_PROBE moves the probe (TestExamplesSkipWithoutRedis
	// points it at a closed port to see the skip).
	addr := "localhost:6379"
	if a := os.Getenv("LIMITER_EXAMPLES_PROBE"); a != "" {
		addr = a
	}
	ex := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := ex.Ping(ctx).Err()
	cancel()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "examples need a Redis on localhost:6379: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "skipping the examples: no Redis on localhost:6379 (%v)\n", err)
		skip := flag.Lookup("test.skip")
		pat := "^Example"
		if old := skip.Value.String(); old != "" {
			pat = "(" + old + ")|^Example"
		}
		_ = skip.Value.Set(pat)
	}
	code := m.Run()
	if err == nil {
		redistest.Clean(context.Background(), ex, examplePrefix)
	}
	ex.Close()
	if cluster != nil {
		cluster.Close()
	}
	os.Exit(code)
}

// backend is one Redis deployment the tests run against.
type backend struct {
	name   string
	prefix string
	// client returns a new, separate client (its own pool).
	client func() redis.UniversalClient
}

func singleRedis(t testing.TB) *backend {
	t.Helper()
	_, prefix := redistest.New(t) // skips or fails (CI) without Redis; cleans the prefix
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	return &backend{name: "redis", prefix: prefix, client: func() redis.UniversalClient {
		o := *opt
		o.ContextTimeoutEnabled = true
		o.PoolSize = 64
		c := redis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		return c
	}}
}

func clusterRedis(t *testing.T) *backend {
	t.Helper()
	clusterOnce.Do(func() { cluster, clusterErr = redistest.StartCluster() })
	if clusterErr != nil {
		if errors.Is(clusterErr, redistest.ErrNoRedisServer) {
			testkit.Unavailable(t, "redis-server (for a cluster)", clusterErr)
		}
		t.Fatal(clusterErr)
	}
	prefix := redistest.Prefix()
	admin := cluster.Client(nil)
	t.Cleanup(func() {
		redistest.Clean(context.Background(), admin, prefix)
		admin.Close()
	})
	return &backend{name: "cluster", prefix: prefix, client: func() redis.UniversalClient {
		c := cluster.Client(&redis.ClusterOptions{ContextTimeoutEnabled: true, PoolSize: 64})
		t.Cleanup(func() { c.Close() })
		return c
	}}
}

// eachBackend runs f against the single Redis and the 3-node Cluster.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("redis", func(t *testing.T) { f(t, singleRedis(t)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("cluster tests skipped in -short mode")
		}
		f(t, clusterRedis(t))
	})
}

func newLimiter(t testing.TB, rdb redis.UniversalClient, opts limiter.Options) *limiter.Limiter {
	t.Helper()
	l, err := limiter.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// snapshot returns a snapshot for tenant in a 30-day period around now.
func snapshot(tenant string, mod func(*limiter.Snapshot)) limiter.Snapshot {
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	s := limiter.Snapshot{
		TenantID: tenant, Plan: "pro", Status: "active", Version: 1,
		PeriodStart: start, PeriodEnd: start.AddDate(0, 0, 30), NextPeriodEnd: start.AddDate(0, 0, 60),
	}
	if mod != nil {
		mod(&s)
	}
	return s
}

func put(t testing.TB, st *limitstore.Store, s limiter.Snapshot) {
	t.Helper()
	if err := st.PutSnapshot(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}
