package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// serveEnv is a working configuration on the package's test database and
// a free port.
func serveEnv(t *testing.T) map[string]string {
	t.Helper()
	redistest.New(t) // skips (or fails in CI) without Redis
	return map[string]string{
		"DATABASE_URL": pgtest.URL(t),
		"REDIS_URL":    redistest.URL(),
		"HTTP_ADDR":    "127.0.0.1:0",
		"ADMIN_TOKEN":  "tga_test_admin_token",
		"METRICS_ADDR": "127.0.0.1:0", // tests run side by side
		// Not a fail-mode test: the production 50 ms would turn a slow
		// reply on loaded cores into a fallback decision.
		"LIMITER_TIMEOUT": "5s",
	}
}

// listeningAddr polls the JSON log for the "api listening" line and returns
// its addr.
func listeningAddr(t *testing.T, logs func() string, exited <-chan int) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(logs(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "api listening" && rec.Addr != "" {
				return rec.Addr
			}
		}
		select {
		case code := <-exited:
			t.Fatalf("api exited with %d before listening; logs:\n%s", code, logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no \"api listening\" log line within 30s; logs:\n%s", logs())
	return ""
}

// waitExit waits for run to return after its ctx was cancelled. Draining an
// idle server takes milliseconds; 10s means something ignores the cancel.
func waitExit(t *testing.T, exited <-chan int, logs func() string) int {
	t.Helper()
	select {
	case code := <-exited:
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not return within 10s of cancel (a goroutine ignores ctx?); logs:\n%s", logs())
		return 0
	}
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRunBadConfigurationExits2WithOneLineNamingTheVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, variable, value string
	}{
		{"unparseable database url", "DATABASE_URL", "postgres://%zz"},
		{"database url of another scheme", "DATABASE_URL", "mysql://root@localhost/tollgate"},
		{"database url without a database", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432"},
		{"unknown log level", "LOG_LEVEL", "loud"},
		{"bad redis url", "REDIS_URL", "http://127.0.0.1:6379"},
		{"bad redis cluster url", "REDIS_CLUSTER_URL", "mysql://x"},
		{"http addr without port", "HTTP_ADDR", "localhost"},
		{"migrate on start not a bool", "MIGRATE_ON_START", "perhaps"},
		{"webhook secret not whsec", "STRIPE_WEBHOOK_SECRET", "secret"},
		{"stripe key not sk", "STRIPE_SECRET_KEY", "pk_test_123"},
		{"bad default plan", "DEFAULT_PLAN", "Free Plan"},
		{"bad grace period", "GRACE_PERIOD", "a week"},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"serve", "migrate", "seed-demo"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				code := run(t.Context(), []string{cmd}, testkit.Getenv(map[string]string{tc.variable: tc.value}), &stdout, &stderr)
				if code != exitConfig {
					t.Fatalf("exit status = %d, want %d; stderr: %s", code, exitConfig, stderr.String())
				}
				out := stderr.String()
				if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
					t.Fatalf("stderr is not exactly one line: %q", out)
				}
				if !strings.Contains(out, tc.variable) {
					t.Fatalf("stderr %q does not name %s", out, tc.variable)
				}
				if stdout.Len() != 0 {
					t.Fatalf("stdout not empty: %q", stdout.String())
				}
			})
		}
	}
}

func TestRunUnknownCommandExits2(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"serv"}, testkit.Getenv(nil), &stdout, &stderr)
	if code != exitConfig {
		t.Fatalf("exit status = %d, want %d", code, exitConfig)
	}
	if !strings.Contains(stderr.String(), `unknown command "serv"`) || !strings.Contains(stderr.String(), "usage:") {
		t.Fatalf("stderr = %q, want the unknown command and the usage", stderr.String())
	}
}

// `api version` prints the build without needing any configuration.
func TestRunVersionPrintsTheBuild(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	// DATABASE_URL unparseable: version must not even load the config.
	code := run(t.Context(), []string{"version"}, testkit.Getenv(map[string]string{"DATABASE_URL": "::"}), &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit status = %d, want 0; stderr %q", code, stderr.String())
	}
	if !regexp.MustCompile(`^api \S+ \(revision \S+.*go1\.\S+\)\n$`).MatchString(stdout.String()) {
		t.Fatalf("version printed %q", stdout.String())
	}
}

func TestRunHelpPrintsUsageAndExits0(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, testkit.Getenv(nil), &stdout, &stderr); code != exitOK {
		t.Fatalf("exit status = %d, want 0", code)
	}
	for _, want := range []string{"serve", "migrate", "seed-demo"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("usage %q does not mention %s", stdout.String(), want)
		}
	}
}

func TestRunMigrateCreatesMissingDatabaseAndIsRepeatable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		testkit.Unavailable(t, "postgres", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) }) // after the drop below
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	name := "tollgate_runtest_" + hex.EncodeToString(suffix[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	url := withDatabase(pgtest.BaseURL(), name)
	for i := range 2 { // the second run finds nothing to do
		var stdout, stderr bytes.Buffer
		if code := run(ctx, []string{"migrate"}, testkit.Getenv(map[string]string{"DATABASE_URL": url}), &stdout, &stderr); code != exitOK {
			t.Fatalf("migrate #%d exit status = %d; stderr:\n%s", i+1, code, stderr.String())
		}
		applied := strings.Count(stderr.String(), `"msg":"migration applied"`)
		if i == 0 && applied == 0 {
			t.Fatalf("first migrate applied nothing; stderr:\n%s", stderr.String())
		}
		if i == 1 && applied != 0 {
			t.Fatalf("second migrate applied %d migrations, want none", applied)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to the created database: %v", err)
	}
	defer conn.Close(context.Background())
	for _, table := range []string{"tenants", "plans", "api_keys", "river_job"} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
			t.Fatalf("table %s missing after migrate (err %v)", table, err)
		}
	}
}

func TestRunMigrateUnreachableDatabaseExits1(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	// Port 1 refuses at once; connect_timeout bounds it anyway.
	getenv := testkit.Getenv(map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/tollgate?sslmode=disable&connect_timeout=2"})
	if code := run(t.Context(), []string{"migrate"}, getenv, &stdout, &stderr); code != exitFailed {
		t.Fatalf("exit status = %d, want %d; stderr:\n%s", code, exitFailed, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"api failed"`) {
		t.Fatalf("stderr does not log the failure: %s", stderr.String())
	}
}

func TestRunServeAnswersThenExits0OnCancel(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	// A port no other process can be handed once ours is let go: the test
	// ends by checking that nothing answers there.
	e["HTTP_ADDR"] = freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout testkit.Buffer
	var stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"serve"}, testkit.Getenv(e), &stdout, &stderr) }()

	addr := listeningAddr(t, stderr.String, exited)
	if got := getStatus(t, "http://"+addr+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", got)
	}
	if got := getStatus(t, "http://"+addr+"/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", got)
	}
	if strings.Contains(stderr.String(), e["ADMIN_TOKEN"]) {
		t.Fatal("a configured admin token was logged")
	}
	// The build is a metric, for dashboards that join it onto others (on
	// the metrics listener, METRICS_ADDR).
	var maddr string
	testkit.Eventually(t, 30*time.Second, "the api metrics listener", func() bool {
		maddr = metricsAddr(t, stderr.String())
		return maddr != ""
	})
	_, metrics := getMetrics(t, "http://"+maddr+"/metrics", "")
	if !regexp.MustCompile(`(?m)^tollgate_build_info\{.*revision=.*version=.*\} 1$`).MatchString(metrics) {
		t.Fatalf("/metrics has no tollgate_build_info:\n%s", metrics)
	}

	cancel() // what SIGTERM does in main
	if code := waitExit(t, exited, stderr.String); code != exitOK {
		t.Fatalf("exit status after cancel = %d, want 0; stderr:\n%s", code, stderr.String())
	}
	// The drain is logged when it starts and when it ends.
	logs := stderr.String()
	if d, s := strings.Index(logs, `"msg":"api draining"`), strings.Index(logs, `"msg":"api stopped"`); d < 0 || s < d {
		t.Fatalf("no \"api draining\" then \"api stopped\" line after the cancel:\n%s", logs)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("server still answers after run returned")
	}
}

// Without ADMIN_TOKEN, serve refuses to start (a token made up per process
// would differ between the instances behind a load balancer): exit 2 and
// one line naming ADMIN_TOKEN, before anything listens.
func TestRunServeWithoutAdminTokenRefusesToStart(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	delete(e, "ADMIN_TOKEN")
	e["MIGRATE_ON_START"] = "false"
	for _, args := range [][]string{nil, {"serve"}} {
		var stdout, stderr testkit.Buffer
		// Bounded: a serve that starts anyway returns at the deadline.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		code := run(ctx, args, testkit.Getenv(e), &stdout, &stderr)
		cancel()
		out := stderr.String()
		if code != exitConfig || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "ADMIN_TOKEN") ||
			!strings.Contains(out, "TOLLGATE_DEV") || strings.Contains(out, "api listening") {
			t.Fatalf("serve %v without ADMIN_TOKEN: exit %d, stderr %q; want 2 and one line naming ADMIN_TOKEN", args, code, out)
		}
	}
	// migrate needs no token.
	var stdout, stderr testkit.Buffer
	if code := run(t.Context(), []string{"migrate"}, testkit.Getenv(e), &stdout, &stderr); code != exitOK {
		t.Fatalf("migrate without ADMIN_TOKEN: exit %d: %s", code, stderr.String())
	}
}

// TOLLGATE_DEV without ADMIN_TOKEN: every api started from the same data
// directory uses the one token in <TOLLGATE_DATA>/admin_token (made once,
// 0600, as make run does), so two instances accept the same token; the
// token is never logged, only the file's path.
func TestRunServeDevUsesOneTokenFileForEveryProcess(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	delete(e, "ADMIN_TOKEN")
	e["MIGRATE_ON_START"] = "false"
	e["TOLLGATE_DEV"] = "true"
	e["TOLLGATE_DATA"] = filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type proc struct {
		addr   string
		stderr *testkit.Buffer
		exited chan int
	}
	var procs []proc
	for range 2 {
		p := proc{stderr: &testkit.Buffer{}, exited: make(chan int, 1)}
		go func() { p.exited <- run(ctx, nil, testkit.Getenv(e), &testkit.Buffer{}, p.stderr) }()
		p.addr = listeningAddr(t, p.stderr.String, p.exited)
		procs = append(procs, p)
	}
	path := filepath.Join(e["TOLLGATE_DATA"], "admin_token")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v), want 0600", path, fi.Mode().Perm(), err)
	}
	token := strings.TrimSpace(string(raw))
	if !strings.HasPrefix(token, "tga_") || len(token) < 40 {
		t.Fatalf("token file holds %q", token)
	}
	for i, p := range procs {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+p.addr+"/admin/v1/plans", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("api %d: the file's token answered %d, want 200", i, res.StatusCode)
		}
		if logs := p.stderr.String(); strings.Contains(logs, token) || !strings.Contains(logs, path) {
			t.Errorf("api %d: logs show the token, or not the file's path:\n%s", i, logs)
		}
	}
	// seed-demo prints the same token (make run shows it to the user). It
	// seeds a database of its own: the package's has a seed test counting
	// the demo tenant's keys.
	seedEnv := map[string]string{}
	for k, v := range e {
		seedEnv[k] = v
	}
	seedDB := "tollgate_devseed_" + strings.ToLower(randomToken()[4:16])
	seedEnv["DATABASE_URL"] = withDatabase(pgtest.BaseURL(), seedDB)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, pgtest.BaseURL()); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{seedDB}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
		}
	})
	var out, errOut testkit.Buffer
	if code := run(t.Context(), []string{"seed-demo"}, testkit.Getenv(seedEnv), &out, &errOut); code != exitOK {
		t.Fatalf("seed-demo: exit %d: %s", code, errOut.String())
	}
	if got := seedLines(t, out.String())["admin_token"]; got != token {
		t.Errorf("seed-demo with TOLLGATE_DEV printed admin_token %q, want the file's", got)
	}
	cancel()
	for _, p := range procs {
		if code := waitExit(t, p.exited, p.stderr.String); code != exitOK {
			t.Fatalf("exit status = %d, want 0", code)
		}
	}
}

func TestServeReportsBoundAddress(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	e["MIGRATE_ON_START"] = "false"
	cfg := mustConfig(t, e)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, cfg, discardLogger(), func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("serve returned before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not report its address within 30s")
	}
	if got := getStatus(t, "http://"+addr+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", got)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return within 10s of cancel")
	}
}

func TestServePortInUseExits1(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	e["MIGRATE_ON_START"] = "false"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"serve"}, testkit.Getenv(e), &stdout, &stderr) }()
	addr := listeningAddr(t, stderr.String, exited)

	e2 := map[string]string{}
	for k, v := range e {
		e2[k] = v
	}
	e2["HTTP_ADDR"] = addr
	var stdout2, stderr2 bytes.Buffer
	if code := run(t.Context(), []string{"serve"}, testkit.Getenv(e2), &stdout2, &stderr2); code != exitFailed {
		t.Fatalf("second serve on %s: exit status = %d, want %d", addr, code, exitFailed)
	}
	cancel()
	waitExit(t, exited, stderr.String)
}

// TestBinaryExits0OnSIGTERM runs the real binary: main's signal wiring is
// the one part run cannot cover.
func TestBinaryExits0OnSIGTERM(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	bin := testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/api")
	cmd := exec.Command(bin, "serve")
	cmd.Env = os.Environ()
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr testkit.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitErr := make(chan error, 1)
	exited := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
		waitErr <- err
	}()

	addr := listeningAddr(t, stderr.String, exited)
	if got := getStatus(t, "http://"+addr+"/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", got)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-exited:
		if err := <-waitErr; err != nil {
			t.Fatalf("api after SIGTERM: %v; logs:\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("api did not exit within 15s of SIGTERM; logs:\n%s", stderr.String())
	}
}

func withDatabase(base, name string) string {
	rest := ""
	if i := strings.IndexByte(base, '?'); i >= 0 {
		base, rest = base[:i], base[i:]
	}
	i := strings.LastIndexByte(base, '/')
	return base[:i+1] + name + rest
}

func mustConfig(t *testing.T, e map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(testkit.Getenv(e))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// randomToken is a fresh tga_… string (tests use it for unique names).
func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "tga_" + hex.EncodeToString(b[:])
}
