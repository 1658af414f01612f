package redistest

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failover tests: a master and a replica of a test's own, with the
// replication cut while the master still takes writes (the replica then
// misses them, as asynchronous replication loses the last writes of a
// master that dies or is partitioned away), and a Switch that moves every
// client to the promoted replica the way a Sentinel or a DNS failover does:
// the connections to the old master break and new ones reach the new one.

// StartReplica starts a private redis-server replicating master and waits
// until its link is up.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	host, port, _ := strings.Cut(master.Addr, ":")
	r := StartServer(t, "--replicaof", host, port)
	WaitFor(t, 10*time.Second, "the replica's link to its master", func() bool {
		return strings.Contains(info(r.Addr, "replication"), "master_link_status:up")
	})
	return r
}

// WaitReplicated waits until the master's replicas have acknowledged
// every write made so far (WAIT).
func WaitReplicated(t testing.TB, master *Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer c.Close()
	n, err := c.Do(context.Background(), "WAIT", 1, 10000).Int64()
	if err != nil || n < 1 {
		t.Fatalf("redistest: WAIT: %d replicas, %v", n, err)
	}
}

// CutReplication makes the replica stop receiving its master's writes
// while keeping its data: it is pointed at a port nobody listens on.
func CutReplication(t testing.TB, replica *Server) {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer c.Close()
	if err := c.Do(context.Background(), "REPLICAOF", "127.0.0.1", port).Err(); err != nil {
		t.Fatalf("redistest: cutting replication: %v", err)
	}
	WaitFor(t, 10*time.Second, "the replica's link to go down", func() bool {
		return strings.Contains(info(replica.Addr, "replication"), "master_link_status:down")
	})
}

// Promote makes the replica a master (REPLICAOF NO ONE), keeping its data.
func Promote(t testing.TB, replica *Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer c.Close()
	if err := c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("redistest: promoting: %v", err)
	}
}

func info(addr, section string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, _ := c.Info(ctx, section).Result()
	return s
}

// WaitFor polls cond until it holds, failing the test after within.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// Switch dials whatever address it points at, whatever address the client
// asked for, and closes the connections it made when it is pointed
// elsewhere: clients built with its Dialer move to a new master as they
// would behind a Sentinel or a DNS name.
type Switch struct {
	target atomic.Pointer[string]
	mu     sync.Mutex
	conns  []net.Conn
}

// NewSwitch returns a Switch pointing at addr.
func NewSwitch(addr string) *Switch {
	s := &Switch{}
	s.target.Store(&addr)
	return s
}

// Dialer is a go-redis Options.Dialer.
func (s *Switch) Dialer(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, *s.target.Load())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
	return c, nil
}

// Point moves the Switch to addr and breaks every connection made so far.
func (s *Switch) Point(addr string) {
	s.target.Store(&addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}
