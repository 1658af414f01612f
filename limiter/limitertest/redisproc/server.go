package redisproc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of a test's own, on a free loopback port in a
// temporary directory, with persistence off: for tests that kill Redis.
type Server struct {
	Addr string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	// exited closes when cmd has exited; waitErr is then its Wait's.
	exited  <-chan struct{}
	waitErr error
}

// StartServer starts a private redis-server (extra arguments are appended
// to its command line) and kills it when the test ends. Without a
// redis-server binary the test skips locally and fails when CI is set.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server", err)
	}
	// A cluster node also listens on its port + 10000 (the bus): both
	// must be below the kernel's ephemeral range and free, or the node
	// exits at start when an outgoing connection holds its bus port.
	offset := 0
	if slices.Contains(extra, "--cluster-enabled") {
		offset = clusterBusOffset
	}
	dir := t.TempDir()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freePort(offset); err != nil {
			t.Fatalf("redisproc: %v", err)
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: dir, args: extra}
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
		s.Kill()
		if !errors.Is(err, errExited) {
			break
		}
		// Exited at start: a port taken between the check and the bind
		// (by another test process); another port is as good.
		t.Logf("redisproc: %v; trying another port", err)
	}
	t.Fatalf("redisproc: %v", err)
	return nil
}

// errExited is a redis-server that exited before it answered.
var errExited = errors.New("redis-server exited at start")

// FreePort returns a loopback TCP port that was free a moment ago, below
// the kernel's ephemeral range, and never the same port twice in one
// process. Below the range because a port from 127.0.0.1:0 is in it: once
// the probe closes it, the kernel may hand that port to any other
// process's listener or outgoing connection (go test runs packages side by
// side) before our server binds it, or after our server stopped, where a
// check that "nothing answers" then finds a stranger (both seen in CI).
// The kernel never hands out ports below the range for :0, and the map
// keeps one process's servers apart; another process picking the same
// port at the same moment is left to chance (one in ~20,000 per pick).
func FreePort() (int, error) { return freePort(0) }

// freePort is FreePort for a server that also binds port+offset (a
// cluster node's bus, offset 10000): both free and below the range.
func freePort(offset int) (int, error) {
	low := ephemeralLow() - offset
	handedMu.Lock()
	defer handedMu.Unlock()
	if low <= quietFirst+100 { // an unusual range: take the kernel's
		for range 100 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			if !handed[port] {
				handed[port] = true
				return port, nil
			}
		}
		return 0, errors.New("redisproc: no loopback port that was not handed out already")
	}
	for range 500 {
		port := quietFirst + rand.IntN(low-quietFirst)
		if handed[port] {
			continue
		}
		if !portFree(port) || (offset > 0 && !portFree(port+offset)) {
			continue // taken
		}
		handed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("redisproc: no free loopback port in %d-%d", quietFirst, low-1)
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// quietFirst is the lowest port FreePort takes: above the well-known and
// the usual registered service ports (Postgres, Redis, the api's 8080).
const quietFirst = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 when it cannot be read).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

func serverArgs(port int, dir string, extra ...string) []string {
	return append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log"),
	}, extra...)
}

func (s *Server) start() error {
	cmd := exec.Command("redis-server", serverArgs(s.port, s.dir, s.args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	s.exited = exited
	go func() {
		s.waitErr = cmd.Wait()
		close(exited)
	}()
	return waitPingWhile(s.Addr, 10*time.Second, exited, func() error {
		return fmt.Errorf("%w (%v) on port %d: %s", errExited, s.waitErr, s.port, s.logTail())
	})
}

// logTail is the end of the server's log, which says why it stopped.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log"))
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return strings.TrimSpace(string(b))
}

// waitPing polls until the server answers PING or the deadline passes.
func waitPing(addr string, within time.Duration) error {
	return waitPingWhile(addr, within, nil, nil)
}

// waitPingWhile is waitPing that gives up with gone() once exited closes.
func waitPingWhile(addr string, within time.Duration, exited <-chan struct{}, gone func() error) error {
	// One dial per ping (go-redis retries a dial five times by default):
	// the loop is the retry, and it looks at exited between pings.
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1, ContextTimeoutEnabled: true})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		select {
		case <-exited: // nil: never
			return gone()
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") { // a server with a password answers so
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server at %s not answering: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// Kill stops the server at once (SIGKILL) and waits for it to exit.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited // start's goroutine waits for the process
	s.cmd = nil
}

// Restart starts the server again on the same port (empty: persistence is
// off) and waits until it answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("redisproc: restart: %v", err)
	}
}

// Signal sends sig to the server (SIGSTOP makes it hang, SIGCONT resumes).
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redisproc: server not running")
	}
	return s.cmd.Process.Signal(sig)
}
