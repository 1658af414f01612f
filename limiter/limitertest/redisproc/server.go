package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
}

// StartServer starts a private redis-server (extra arguments are appended
// to its command line) and kills it when the test ends. Without a
// redis-server binary the test skips locally and fails when CI is set.
func StartServer(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server", err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: t.TempDir(), args: extra}
	if err := s.start(); err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// FreePort returns a loopback TCP port that was free a moment ago, and
// never the same port twice in one process: the kernel may hand a just
// closed port out again, and two servers a test starts on "free" ports
// would then share one (a backend that failed to bind while its probe
// reached the api on the same port was seen in CI).
func FreePort() (int, error) {
	handedMu.Lock()
	defer handedMu.Unlock()
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
	return waitPing(s.Addr, 10*time.Second)
}

// waitPing polls until the server answers PING or the deadline passes.
func waitPing(addr string, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
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
	_ = s.cmd.Wait()
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
