package redisproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real 3-master Redis Cluster on loopback ports, for tests
// that must pass on a Cluster as well as on a single Redis.
type Cluster struct {
	Addrs []string
	dir   string
	procs []*exec.Cmd
}

// ErrNoRedisServer is returned by StartCluster when redis-server or
// redis-cli is not installed.
var ErrNoRedisServer = errors.New("redisproc: redis-server or redis-cli not found")

// StartCluster starts three cluster-enabled redis-servers in a temporary
// directory, joins them with redis-cli --cluster create and waits for
// cluster_state:ok on every node. It takes no testing.TB so that a
// TestMain or a sync.Once can start one cluster per test package; call
// Close when done.
func StartCluster() (*Cluster, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoRedisServer, err)
		}
	}
	dir, err := os.MkdirTemp("", "redisproc-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		port, err := freePort(clusterBusOffset) // the node's bus listens on port+10000
		if err != nil {
			return nil, err
		}
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return nil, err
		}
		cmd := exec.Command("redis-server", serverArgs(port, nodeDir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "2000")...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting redis-server: %w", err)
		}
		c.procs = append(c.procs, cmd)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c.Addrs = append(c.Addrs, addr)
		if err := waitPing(addr, 10*time.Second); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	var out bytes.Buffer
	create := exec.Command("redis-cli", args...)
	create.Stdout, create.Stderr = &out, &out
	if err := create.Run(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out.String())
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range c.Addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				return nil, fmt.Errorf("redisproc: cluster node %s not ok: %v %s", addr, err, info)
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
		cl.Close()
	}
	ok = true
	return c, nil
}

// Client returns a new cluster client on the cluster's nodes.
func (c *Cluster) Client(opt *redis.ClusterOptions) *redis.ClusterClient {
	if opt == nil {
		opt = &redis.ClusterOptions{}
	}
	opt.Addrs = c.Addrs
	return redis.NewClusterClient(opt)
}

// Close kills the nodes and removes their directory.
func (c *Cluster) Close() {
	for _, p := range c.procs {
		if p.Process != nil {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}
	c.procs = nil
	_ = os.RemoveAll(c.dir)
}

// clusterBusOffset is where Redis puts a cluster node's bus: its port +
// 10000 (by default; serverArgs sets no cluster-port).
const clusterBusOffset = 10000
