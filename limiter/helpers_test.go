package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
	"github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"
)

var (
	clusterOnce sync.Once
	cluster     *redisproc.Cluster
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
		redisproc.Clean(context.Background(), ex, examplePrefix)
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
	_, prefix := redisproc.New(t) // skips or fails (CI) without Redis; cleans the prefix
	opt, err := redis.ParseURL(redisproc.URL())
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
	clusterOnce.Do(func() { cluster, clusterErr = redisproc.StartCluster() })
	if clusterErr != nil {
		if errors.Is(clusterErr, redisproc.ErrNoRedisServer) {
			redisproc.Unavailable(t, "redis-server (for a cluster)", clusterErr)
		}
		t.Fatal(clusterErr)
	}
	prefix := redisproc.Prefix()
	admin := cluster.Client(nil)
	t.Cleanup(func() {
		redisproc.Clean(context.Background(), admin, prefix)
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
	return limitertest.Snapshot(tenant, mod)
}

// store reads and writes Redis the way Tollgate's server does, by the
// protocol (package keyspace): the limiter's tests import none of the
// server's packages.
type store struct {
	rdb  redis.UniversalClient
	keys keyspace.Keys
}

func newStore(rdb redis.UniversalClient, prefix string) *store {
	_, cluster := rdb.(*redis.ClusterClient)
	return &store{rdb: rdb, keys: keyspace.Keys{Prefix: prefix, Cluster: cluster}}
}

// Keys returns the key names of the store's prefix.
func (s *store) Keys() keyspace.Keys { return s.keys }

// PutSnapshot writes and announces snap as the server does.
func (s *store) PutSnapshot(ctx context.Context, snap limiter.Snapshot) error {
	raw, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	_, err = s.keys.PutSnapshot(ctx, s.rdb, snap.TenantID, raw, snap.Version, 7*24*time.Hour)
	return err
}

// Snapshot reads the tenant's stored snapshot; ok is false when there is none.
func (s *store) Snapshot(ctx context.Context, tenant string) (snap limiter.Snapshot, ok bool, err error) {
	raw, err := s.rdb.Get(ctx, s.keys.Snapshot(tenant)).Bytes()
	if errors.Is(err, redis.Nil) {
		return snap, false, nil
	}
	if err != nil {
		return snap, false, err
	}
	return snap, true, json.Unmarshal(raw, &snap)
}

// Used reads a period counter; ok is false when it is missing.
func (s *store) Used(ctx context.Context, tenant, meter string, periodStart time.Time) (n int64, ok bool, err error) {
	n, err = s.rdb.HGet(ctx, s.keys.State(tenant), keyspace.CounterOf(meter, periodStart).Used()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// Unflushed is what of a period counter the server's flush has not moved
// to Postgres yet (q − f).
func (s *store) Unflushed(ctx context.Context, tenant, meter string, periodStart time.Time) (int64, error) {
	c := keyspace.CounterOf(meter, periodStart)
	v, err := s.rdb.HMGet(ctx, s.keys.State(tenant), c.Used(), c.Flushed()).Result()
	if err != nil {
		return 0, err
	}
	var n [2]int64
	for i, x := range v {
		if str, ok := x.(string); ok {
			if n[i], err = strconv.ParseInt(str, 10, 64); err != nil {
				return 0, err
			}
		}
	}
	return n[0] - n[1], nil
}

// Refusals reads the tenant's refusals per policy on day's UTC day.
func (s *store) Refusals(ctx context.Context, tenant string, day time.Time) (map[string]int64, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Refusals(tenant, day)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		if out[k], err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func put(t testing.TB, st *store, s limiter.Snapshot) {
	t.Helper()
	if err := st.PutSnapshot(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}
