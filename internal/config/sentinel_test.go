package config

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// REDIS_SENTINEL_ADDRS with REDIS_SENTINEL_MASTER gives a failover client
// (the Sentinels' master, with REDIS_URL's credentials and database);
// either without the other, a malformed address or Sentinel with a
// Cluster is refused naming the variable.
func TestSentinelConfiguration(t *testing.T) {
	c, err := Load(envOf(map[string]string{"REDIS_SENTINEL_ADDRS": "10.0.0.1:26379, 10.0.0.2:26379",
		"REDIS_SENTINEL_MASTER": "mymaster", "REDIS_SENTINEL_PASSWORD": "s3cret", "REDIS_URL": "redis://:pw@ignored:6379/3"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.RedisSentinelAddrs) != 2 || c.RedisSentinelAddrs[1] != "10.0.0.2:26379" || c.RedisSentinelMaster != "mymaster" || c.RedisSentinelPassword != "s3cret" {
		t.Fatalf("sentinel fields: %+v", c)
	}
	rdb, err := c.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cl, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("client %T", rdb)
	}
	// A failover client names its "address" after the master it follows.
	if o := cl.Options(); !strings.Contains(o.Addr, "FailoverClient") || o.Password != "pw" || o.DB != 3 || !o.ContextTimeoutEnabled {
		t.Errorf("options: addr %q password %q db %d ctx %v", o.Addr, o.Password, o.DB, o.ContextTimeoutEnabled)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_SENTINEL_ADDRS": "10.0.0.1:26379"}, "REDIS_SENTINEL_MASTER"},
		{map[string]string{"REDIS_SENTINEL_MASTER": "mymaster"}, "REDIS_SENTINEL_ADDRS"},
		{map[string]string{"REDIS_SENTINEL_ADDRS": "10.0.0.1", "REDIS_SENTINEL_MASTER": "m"}, "REDIS_SENTINEL_ADDRS"},
		{map[string]string{"REDIS_SENTINEL_ADDRS": "10.0.0.1:26379", "REDIS_SENTINEL_MASTER": "m", "REDIS_CLUSTER_URL": "redis://10.0.0.9:7000"}, "REDIS_SENTINEL_ADDRS"},
	} {
		if _, err := Load(envOf(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to name %s", tc.env, err, tc.want)
		}
	}
}

// A Cluster client reloads the slots every 2 s (go-redis's default is
// 60 s), so that it finds a dead master's promoted replica within seconds:
// a dead master answers no MOVED to send it there.
func TestClusterClientReloadsSlotsWithinSeconds(t *testing.T) {
	c, err := Load(envOf(map[string]string{"REDIS_CLUSTER_URL": "redis://10.0.0.1:7000?addr=10.0.0.2:7000"}))
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := c.NewRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cl, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("client %T", rdb)
	}
	if o := cl.Options(); o.ClusterStateReloadInterval != 2*time.Second || !o.ContextTimeoutEnabled {
		t.Errorf("reload interval %s, context timeouts %v", o.ClusterStateReloadInterval, o.ContextTimeoutEnabled)
	}
}
