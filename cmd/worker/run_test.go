package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func workerEnv(t *testing.T) map[string]string {
	t.Helper()
	redistest.New(t) // skips (or fails in CI) without Redis
	return map[string]string{
		"DATABASE_URL":        pgtest.URL(t),
		"REDIS_URL":           redistest.URL(),
		"WORKER_METRICS_ADDR": "127.0.0.1:0",
	}
}

// waitForLog polls logs for msg until the deadline or an early exit.
func waitForLog(t *testing.T, logs func() string, msg string, exited <-chan int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(logs(), `"msg":"`+msg+`"`) {
			return
		}
		select {
		case code := <-exited:
			t.Fatalf("worker exited with %d before %q; logs:\n%s", code, msg, logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %q log line within 30s; logs:\n%s", msg, logs())
}

func TestRunBadConfigurationExits2WithOneLineNamingTheVariable(t *testing.T) {
	cases := []struct {
		name, variable, value string
	}{
		{"unparseable database url", "DATABASE_URL", "postgres://%zz"},
		{"database url without a database", "DATABASE_URL", "postgres://postgres@127.0.0.1:5432"},
		{"unknown log level", "LOG_LEVEL", "verbose"},
		{"bad redis url", "REDIS_URL", "tcp://127.0.0.1:6379"},
		{"bad http addr", "HTTP_ADDR", "8080"},
		{"flush interval too short", "FLUSH_INTERVAL", "1ms"},
		{"bad shutdown timeout", "SHUTDOWN_TIMEOUT", "soon"},
		{"unknown limiter fail mode", "LIMITER_FAIL_MODE", "maybe"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), nil, testkit.Getenv(map[string]string{tc.variable: tc.value}), &stdout, &stderr)
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
		})
	}
}

func TestRunUnexpectedArgumentExits2(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"serve"}, testkit.Getenv(nil), &stdout, &stderr); code != exitConfig {
		t.Fatalf("exit status = %d, want %d", code, exitConfig)
	}
	if !strings.Contains(stderr.String(), `unexpected argument "serve"`) || !strings.Contains(stderr.String(), "usage:") {
		t.Fatalf("stderr = %q, want the argument and the usage", stderr.String())
	}
}

func TestRunVersionPrintsTheBuild(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"version"}, testkit.Getenv(nil), &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "worker ") || !strings.Contains(stdout.String(), "(revision ") {
		t.Fatalf("version printed %q", stdout.String())
	}
}

func TestRunHelpExits0(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"-h"}, testkit.Getenv(nil), &stdout, &stderr); code != exitOK {
		t.Fatalf("exit status = %d, want 0", code)
	}
	if !strings.Contains(stdout.String(), "usage: worker") {
		t.Fatalf("stdout = %q, want the usage", stdout.String())
	}
}

func TestRunUnreachableDatabaseExits1(t *testing.T) {
	var stdout, stderr bytes.Buffer
	getenv := testkit.Getenv(map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/tollgate?sslmode=disable&connect_timeout=2"})
	if code := run(t.Context(), nil, getenv, &stdout, &stderr); code != exitFailed {
		t.Fatalf("exit status = %d, want %d; stderr:\n%s", code, exitFailed, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"worker failed"`) {
		t.Fatalf("stderr does not log the failure: %s", stderr.String())
	}
}

func TestRunStartsAndStopsCleanlyOnCancel(t *testing.T) {
	e := workerEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, nil, testkit.Getenv(e), &stdout, &stderr) }()

	waitForLog(t, stderr.String, "worker started", exited)
	cancel() // what SIGTERM does in main
	select {
	case code := <-exited:
		if code != exitOK {
			t.Fatalf("exit status after cancel = %d, want 0; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not return within 15s of cancel")
	}
	if d, s := strings.Index(stderr.String(), `"msg":"worker draining"`), strings.Index(stderr.String(), `"msg":"worker stopped"`); d < 0 || s < d {
		t.Fatalf("no \"worker draining\" then \"worker stopped\" log line:\n%s", stderr.String())
	}
	// River narrates at DEBUG: its client and producer lines (job counts
	// every few seconds) were most of an INFO log.
	if strings.Contains(stderr.String(), `"level":"INFO","msg":"River client`) {
		t.Fatalf("River's routine lines are at INFO:\n%s", stderr.String())
	}
}

func TestRunMigrateOnStartFalseSkipsMigrations(t *testing.T) {
	e := workerEnv(t)
	e["MIGRATE_ON_START"] = "false"
	var stderr testkit.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, nil, testkit.Getenv(e), &stderr, &stderr) }()
	waitForLog(t, stderr.String, "worker started", exited)
	if strings.Contains(stderr.String(), `"msg":"migration applied"`) {
		t.Fatal("MIGRATE_ON_START=false still migrated")
	}
	cancel()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Fatalf("exit status = %d, want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not return within 15s of cancel")
	}
}

// TestBinaryExits0OnSIGTERM runs the real binary: main's signal wiring is
// the one part run cannot cover.
func TestBinaryExits0OnSIGTERM(t *testing.T) {
	e := workerEnv(t)
	bin := testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")
	cmd := exec.Command(bin)
	cmd.Env = os.Environ()
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs testkit.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
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

	waitForLog(t, logs.String, "worker started", exited)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-exited:
		if err := <-waitErr; err != nil {
			t.Fatalf("worker after SIGTERM: %v; logs:\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("worker did not exit within 20s of SIGTERM; logs:\n%s", logs.String())
	}
}

// The worker serves its own /metrics: the Stripe processing counters and the
// backlog gauges live in its process, not the api's.
func TestRunServesMetrics(t *testing.T) {
	e := workerEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, nil, testkit.Getenv(e), &stdout, &stderr) }()
	waitForLog(t, stderr.String, "worker metrics listening", exited)

	var addr string
	for _, line := range strings.Split(stderr.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "worker metrics listening" {
			addr = rec.Addr
		}
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics on %q: %v", addr, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", res.StatusCode)
	}
	for _, name := range []string{"tollgate_stripe_events{", "tollgate_stripe_oldest_pending_event_age_seconds", "go_goroutines",
		"tollgate_usage_flush_lag_seconds", "tollgate_usage_flush_passes_total{result=\"ok\"}", "tollgate_usage_periods_closed_total",
		"tollgate_usage_periods_overdue", "tollgate_stripe_meter_reports{status=\"failed\"}", "tollgate_build_info{"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("worker /metrics lacks %s", name)
		}
	}
	cancel()
	if code := <-exited; code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

func TestRunBadMetricsAddrExits2(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), nil, testkit.Getenv(map[string]string{"WORKER_METRICS_ADDR": "9091"}), &stdout, &stderr)
	if code != exitConfig || !strings.Contains(stderr.String(), "WORKER_METRICS_ADDR") {
		t.Fatalf("exit %d, stderr %q; want 2 naming WORKER_METRICS_ADDR", code, stderr.String())
	}
}

// With METRICS_TOKEN the worker's /metrics answers that bearer token only.
func TestRunMetricsBehindMetricsToken(t *testing.T) {
	e := workerEnv(t)
	e["METRICS_TOKEN"] = "metrics-token-0123456789"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, nil, testkit.Getenv(e), &stdout, &stderr) }()
	waitForLog(t, stderr.String, "worker metrics listening", exited)
	var addr string
	for _, line := range strings.Split(stderr.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "worker metrics listening" {
			addr = rec.Addr
		}
	}
	get := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(""); code != http.StatusUnauthorized || strings.Contains(body, "tollgate_") {
		t.Errorf("worker /metrics without the token: %d %.200s, want 401", code, body)
	}
	if code, body := get(e["METRICS_TOKEN"]); code != http.StatusOK || !strings.Contains(body, "tollgate_usage_flush_lag_seconds") {
		t.Errorf("worker /metrics with METRICS_TOKEN: %d %.200s, want 200", code, body)
	}
	// The liveness probe's /healthz needs no token.
	res, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("worker /healthz with METRICS_TOKEN set: %d %v, want 200 with nosniff", res.StatusCode, res.Header)
	}
	cancel()
	if code := <-exited; code != exitOK {
		t.Fatalf("exit %d", code)
	}
}
