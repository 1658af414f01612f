package redistest

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// ReplicatedCluster is a Redis Cluster of a test's own: three masters,
// each with one replica, every node requiring a password (so that a
// replica's link can be cut: see CutReplica).
type ReplicatedCluster struct {
	Nodes    []*Server
	Password string
}

// StartReplicatedCluster starts six cluster-enabled redis-servers, joins
// them with redis-cli --cluster create --cluster-replicas 1, and waits
// until the cluster is ok and every replica's link is up. The servers are
// killed when the test ends.
func StartReplicatedCluster(t testing.TB) *ReplicatedCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		testkit.Unavailable(t, "redis-cli", err)
	}
	c := &ReplicatedCluster{Password: "pw-" + Prefix()}
	var addrs []string
	for i := 0; i < 6; i++ {
		// nodes.conf goes in the server's own directory (--dir)
		s := StartServer(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--requirepass", c.Password, "--masterauth", c.Password, "--repl-diskless-sync-delay", "0")
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"-a", c.Password, "--no-auth-warning", "--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	var out bytes.Buffer
	create := exec.Command("redis-cli", args...)
	create.Stdout, create.Stderr = &out, &out
	if err := create.Run(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out.String())
	}
	WaitFor(t, 60*time.Second, "the replicated cluster to be ok with its replicas' links up", func() bool {
		replicas := 0
		for _, s := range c.Nodes {
			cl := c.node(s.Addr)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ci, _ := cl.ClusterInfo(ctx).Result()
			rep, _ := cl.Info(ctx, "replication").Result()
			cancel()
			cl.Close()
			if !strings.Contains(ci, "cluster_state:ok") {
				return false
			}
			if strings.Contains(rep, "role:slave") {
				if !strings.Contains(rep, "master_link_status:up") {
					return false
				}
				replicas++
			}
		}
		return replicas == 3
	})
	return c
}

func (c *ReplicatedCluster) node(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: c.Password, MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
}

// Client returns a cluster client on the cluster's nodes.
func (c *ReplicatedCluster) Client(opt *redis.ClusterOptions) *redis.ClusterClient {
	if opt == nil {
		opt = &redis.ClusterOptions{}
	}
	for _, s := range c.Nodes {
		opt.Addrs = append(opt.Addrs, s.Addr)
	}
	opt.Password = c.Password
	return redis.NewClusterClient(opt)
}

// Shard returns the master serving key's slot and its replica, once the
// cluster's view (gossip) names both.
func (c *ReplicatedCluster) Shard(t testing.TB, key string) (master, replica *Server) {
	t.Helper()
	WaitFor(t, 30*time.Second, "the master and the replica of "+key, func() bool {
		master, replica, _ = c.shard(t, key)
		return master != nil && replica != nil
	})
	return master, replica
}

func (c *ReplicatedCluster) shard(t testing.TB, key string) (master, replica *Server, nodes string) {
	cl := c.node(c.Nodes[0].Addr)
	defer cl.Close()
	ctx := context.Background()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err = cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, nil, ""
	}
	byAddr := map[string]*Server{}
	for _, s := range c.Nodes {
		byAddr[s.Addr] = s
	}
	var masterID string
	lines := strings.Split(strings.TrimSpace(nodes), "\n")
	for _, ln := range lines {
		f := strings.Fields(ln)
		if len(f) < 9 || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			if atoi(lo) <= slot && slot <= atoi(hi) {
				masterID, master = f[0], byAddr[strings.Split(f[1], "@")[0]]
			}
		}
	}
	for _, ln := range lines {
		f := strings.Fields(ln)
		if len(f) >= 4 && strings.Contains(f[2], "slave") && f[3] == masterID {
			replica = byAddr[strings.Split(f[1], "@")[0]]
		}
	}
	return master, replica, nodes
}

func atoi(s string) int64 {
	var n int64
	for _, r := range s {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int64(r-'0')
	}
	return n
}

// WaitReplicated waits until master's replica has acknowledged every
// write made so far.
func (c *ReplicatedCluster) WaitReplicated(t testing.TB, master *Server) {
	t.Helper()
	cl := c.node(master.Addr)
	defer cl.Close()
	n, err := cl.Do(context.Background(), "WAIT", 1, 10000).Int64()
	if err != nil || n < 1 {
		t.Fatalf("redistest: WAIT: %d replicas, %v", n, err)
	}
}

// CutReplica stops replica from receiving its master's writes while it
// keeps its data and its place in the cluster: it is given a wrong
// password for its master and its link is killed, so that it cannot
// reconnect (REPLICAOF is refused in cluster mode).
func (c *ReplicatedCluster) CutReplica(t testing.TB, replica *Server) {
	t.Helper()
	cl := c.node(replica.Addr)
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ConfigSet(ctx, "masterauth", "wrong-"+c.Password).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Do(ctx, "CLIENT", "KILL", "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 10*time.Second, "the replica's link to go down", func() bool {
		rep, _ := cl.Info(ctx, "replication").Result()
		return strings.Contains(rep, "master_link_status:down")
	})
}

// TakeOver promotes replica in place of its master (CLUSTER FAILOVER
// TAKEOVER: without the master's agreement, which is dead) and waits until
// every live node sees it serve the slots.
func (c *ReplicatedCluster) TakeOver(t testing.TB, replica *Server) {
	t.Helper()
	cl := c.node(replica.Addr)
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 30*time.Second, "the replica to be a master", func() bool {
		rep, _ := cl.Info(ctx, "replication").Result()
		return strings.Contains(rep, "role:master")
	})
}
