package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// TestMakeRunCleanRunWithoutServices is `make run` → Ctrl-C → `make clean`
// → `make run` on a machine where no Postgres or Redis answers: the scripts
// start throwaway servers (on private ports and a private data folder here,
// so the shared ones are never touched), Ctrl-C stops them with api and
// worker and reads as a stop, clean stops servers it started and deletes
// their data (the next run does not meet a server running on deleted
// files), and the next run starts from scratch. As root the data folder is
// one the postgres user cannot enter (t.TempDir is 0700), the case of a
// checkout under /root.
func TestMakeRunCleanRunWithoutServices(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts Postgres, Redis, api and worker twice")
	}
	for _, tool := range []string{"bash", "curl", "redis-server", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Unavailable(t, tool, err)
		}
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
		if _, err := exec.LookPath("initdb"); err != nil {
			testkit.Unavailable(t, "initdb (PostgreSQL server binaries)", err)
		}
	}
	testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")
	binDir := filepath.Dir(testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/api"))
	dataDir := filepath.Join(t.TempDir(), "data")
	pgAddr, rdAddr, apiAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env := []string{}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "ADMIN_TOKEN", "HTTP_ADDR", "PUBLIC_URL", "DATABASE_URL", "REDIS_URL", "REDIS_CLUSTER_URL", "MIGRATE_ON_START", "TOLLGATE_DATA", "TOLLGATE_BIN":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"DATABASE_URL=postgres://postgres@"+pgAddr+"/tollgate?sslmode=disable",
		"REDIS_URL=redis://"+rdAddr+"/0",
		"HTTP_ADDR="+apiAddr,
		"TOLLGATE_DATA="+dataDir,
		"TOLLGATE_BIN="+binDir,
		"WORKER_METRICS_ADDR=off",
	)
	services := func(what string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "../../scripts/services.sh", what)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("services.sh %s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	// Whatever happens, the servers this test started stop with it.
	t.Cleanup(func() { _ = exec.Command("bash", "../../scripts/services.sh", "stop").Run() })
	listening := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	for _, a := range []string{pgAddr, rdAddr} {
		if listening(a) {
			t.Fatalf("%s answers before the test started anything", a)
		}
	}

	// `make clean` is services.sh clean and rm -rf bin (not run here: it
	// would delete the checkout's bin/).
	if out, err := exec.Command("make", "-n", "-C", "../..", "clean").CombinedOutput(); err != nil || !strings.Contains(string(out), "scripts/services.sh clean") {
		t.Fatalf("make -n clean: %v\n%s", err, out)
	}

	runOnce := func(run int, stop syscall.Signal) {
		t.Helper()
		out := services("start")
		if !strings.Contains(out, "starting a throwaway PostgreSQL") || !strings.Contains(out, "starting a throwaway Redis") {
			t.Fatalf("run %d: services.sh started no throwaway servers:\n%s", run, out)
		}
		cmd := exec.Command("bash", "../../scripts/run.sh")
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var buf testkit.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		key := waitForLine(t, buf.String, `demo API key (tg_\S+)`, exited)
		tenant := waitForLine(t, buf.String, `demo tenant +(\S+)`, exited)
		if !strings.Contains(buf.String(), "T="+tenant) {
			t.Fatalf("run %d: the output does not give the README's T:\n%s", run, buf.String())
		}
		if out, err := exec.Command("curl", "-fsS", "-H", "Authorization: Bearer "+key, "http://"+apiAddr+"/v1/entitlements").CombinedOutput(); err != nil || !strings.Contains(string(out), tenant) {
			t.Fatalf("run %d: GET /v1/entitlements with the printed key: %v %s\noutput:\n%s", run, err, out, buf.String())
		}
		if stop == syscall.SIGINT {
			// Ctrl-C: the terminal signals the whole foreground group.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		} else {
			_ = cmd.Process.Signal(stop)
		}
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("run %d: run.sh did not stop within 60s of %v; output:\n%s", run, stop, buf.String())
		}
		code := cmd.ProcessState.ExitCode()
		if (stop == syscall.SIGINT && code != 0 && code != 130) || (stop == syscall.SIGTERM && code != 143) {
			t.Fatalf("run %d: run.sh exited %d after %v; output:\n%s", run, code, stop, buf.String())
		}
		o := buf.String()
		if strings.Contains(o, "a process exited") || !strings.Contains(o, "run: stopped") {
			t.Fatalf("run %d: after %v the output reads like a crash or not like a stop:\n%s", run, stop, o)
		}
		for _, a := range []string{apiAddr, pgAddr, rdAddr} {
			if listening(a) {
				t.Fatalf("run %d: %s still answers after run.sh stopped:\n%s", run, a, o)
			}
		}
	}

	runOnce(1, syscall.SIGINT)

	// Servers left running (as `make test` leaves them), then `make clean`.
	services("start")
	pgDir := filepath.Join(dataDir, "postgres")
	if b, err := os.ReadFile(filepath.Join(dataDir, "postgres.dir")); err == nil {
		pgDir = strings.TrimSpace(string(b)) // root: the data is where the postgres user can reach
	} else if os.Geteuid() == 0 {
		t.Fatalf("as root with a data folder postgres cannot enter, no postgres.dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pgDir, "PG_VERSION")); err != nil {
		t.Fatalf("no Postgres data at %s: %v", pgDir, err)
	}
	services("clean")
	for _, a := range []string{pgAddr, rdAddr} {
		if listening(a) {
			t.Fatalf("%s still answers after clean", a)
		}
	}
	for _, d := range []string{dataDir, pgDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after clean (%v)", d, err)
		}
	}

	runOnce(2, syscall.SIGTERM)
	services("clean")
}
