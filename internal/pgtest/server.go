//go:build linux

package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// Server is a Postgres of a test's own (initdb in a temporary directory,
// a free loopback port, trust authentication, fsync off), for tests that
// stop Postgres: the shared server at BaseURL must never go down under the
// other packages' tests.
//
// Postgres refuses to run as root; as root the server runs as the
// "postgres" user that Debian's packages create.
type Server struct {
	Port int
	bin  string
	dir  string
	cred *syscall.Credential // nil: run as the current user
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServer initialises and starts a private Postgres and stops it when
// the test ends. Without Postgres's server binaries (initdb, postgres) the
// test skips locally and fails when CI is set.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin, err := serverBinDir()
	if err != nil {
		testkit.Unavailable(t, "postgres server binaries", err)
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresUser(); err != nil {
			testkit.Unavailable(t, "a non-root user to run postgres as", err)
		}
	}
	// Not t.TempDir: its parents are root's and closed to the postgres user.
	if s.dir, err = os.MkdirTemp("", "tollgate-pg-"); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(s.dir) })
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	if out, err := s.command("initdb", "-D", s.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	if s.Port, err = freePort(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.kill)
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// URL is the connection URL of database db on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// Stop shuts the server down as `pg_ctl stop -m immediate` does (SIGQUIT:
// no checkpoint, every connection cut, crash recovery on the next start)
// and waits until it has exited.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("pgtest: postgres did not stop within 30s of SIGQUIT")
	}
	s.cmd = nil
}

// Start starts a stopped server again on the same port and data directory
// and waits until it accepts connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: restart: %v", err)
	}
}

// Pause stops every process of the server with SIGSTOP (the postmaster
// first, so that it forks nothing new, then each of its children: the
// backends run in sessions of their own, out of reach of a group signal),
// so that Postgres hangs as a wedged host does: connections are accepted by
// the kernel and nothing answers. Resume (SIGCONT) undoes it; the test's
// end resumes a paused server before killing it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.signalAll(syscall.SIGSTOP); err != nil {
		t.Fatalf("pgtest: pause: %v", err)
	}
}

// Resume continues a paused server.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.signalAll(syscall.SIGCONT); err != nil {
		t.Fatalf("pgtest: resume: %v", err)
	}
}

func (s *Server) signalAll(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("server not running")
	}
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid …": comm may hold spaces, so read after
		// its closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if child, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			_ = syscall.Kill(child, sig)
		}
	}
	return nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	// Dies with the test binary, even when no Cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (s *Server) start() error {
	cmd := s.command("postgres", "-D", s.data(), "-p", strconv.Itoa(s.Port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=50", "-c", "shared_buffers=16MB")
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			s.cmd = nil
			return fmt.Errorf("postgres exited while starting:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not answering: %w", s.Port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.signalAll(syscall.SIGCONT) // a paused server would never exit
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// serverBinDir finds initdb and postgres: PG_BIN, else the newest
// /usr/lib/postgresql/*/bin (Debian's layout, not on PATH), else PATH.
func serverBinDir() (string, error) {
	has := func(dir string) bool {
		_, err1 := os.Stat(filepath.Join(dir, "initdb"))
		_, err2 := os.Stat(filepath.Join(dir, "postgres"))
		return err1 == nil && err2 == nil
	}
	if d := os.Getenv("PG_BIN"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("PG_BIN=%s has no initdb and postgres", d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no initdb and postgres in PG_BIN, /usr/lib/postgresql/*/bin or PATH (Debian: apt-get install postgresql)")
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// postgresUser is the account root runs the server as.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres: uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
