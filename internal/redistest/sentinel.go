package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// Sentinel is a redis-sentinel of a test's own watching one master, with
// timeouts short enough for a test: the master is down after 1 s without
// an answer and the failover starts at once (quorum 1).
type Sentinel struct {
	Addr   string
	Master string
	cmd    *exec.Cmd
}

// StartSentinel starts a redis-sentinel monitoring master under the name
// master, and waits until it knows the master's replicas (it finds them
// through the master) so that it can promote one. Without a
// redis-sentinel binary the test skips locally and fails when CI is set.
func StartSentinel(t testing.TB, name string, master *Server, replicas int) *Sentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		testkit.Unavailable(t, "redis-sentinel", err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	host, mport, _ := strings.Cut(master.Addr, ":")
	conf := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it: a file of its own
	body := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
logfile %s
sentinel monitor %s %s %s 1
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, filepath.Join(dir, "sentinel.log"), name, host, mport, name, name, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: starting redis-sentinel: %v", err)
	}
	s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(port), Master: name, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	WaitFor(t, 30*time.Second, "the Sentinel to know the master's replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rs, err := c.Replicas(ctx, name).Result()
		if err != nil {
			return false
		}
		up := 0
		for _, r := range rs {
			if !strings.Contains(r["flags"], "down") && r["master-link-status"] == "ok" {
				up++
			}
		}
		return up >= replicas
	})
	return s
}

// MasterAddr is the master the Sentinel names now.
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	a, err := c.GetMasterAddrByName(context.Background(), s.Master).Result()
	if err != nil || len(a) != 2 {
		t.Fatalf("redistest: sentinel master: %v %v", a, err)
	}
	return a[0] + ":" + a[1]
}
