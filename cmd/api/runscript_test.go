package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// TestMakeRunScriptServesThePrintedKey runs scripts/run.sh (what `make run`
// runs after building) end to end: on a database that does not exist yet it
// migrates, seeds, starts api and worker, prints a key that works against
// GET /v1/entitlements and an admin token that works against the admin API,
// keeps that token across runs, and stops both processes on SIGTERM.
func TestMakeRunScriptServesThePrintedKey(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds both binaries and runs the stack twice")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testkit.Unavailable(t, tool, err)
		}
	}
	rdb, _ := redistest.New(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		testkit.Unavailable(t, "postgres", err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	dbName := "tollgate_runsh_" + hex.EncodeToString(suffix[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)")
	})

	// run.sh finds both binaries in TOLLGATE_BIN: testkit builds them once,
	// side by side.
	testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")
	binDir := filepath.Dir(testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/api"))
	dataDir := t.TempDir()
	addr := freeAddr(t)
	env := []string{}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "ADMIN_TOKEN", "HTTP_ADDR", "PUBLIC_URL", "DATABASE_URL", "REDIS_URL", "REDIS_CLUSTER_URL", "MIGRATE_ON_START":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"DATABASE_URL="+withDatabase(pgtest.BaseURL(), dbName),
		"REDIS_URL="+redistest.URL(),
		"HTTP_ADDR="+addr,
		"TOLLGATE_DATA="+dataDir,
		"TOLLGATE_BIN="+binDir,
	)

	var tenantID string
	t.Cleanup(func() {
		if tenantID != "" {
			// The api keeps its snapshots under the fixed prefix "tg".
			redistest.Clean(context.Background(), rdb, "tg:{t:"+tenantID+"}")
		}
	})

	var tokens []string
	for run := 1; run <= 2; run++ {
		cmd := exec.Command("bash", "../../scripts/run.sh")
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out testkit.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Whatever happens, nothing this run started outlives the test.
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()

		key := waitForLine(t, out.String, `demo API key (tg_\S+)`, exited)
		token := waitForLine(t, out.String, `admin token +(\S+)`, exited)
		tokens = append(tokens, token)

		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/entitlements", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("run %d: GET /v1/entitlements: %v", run, err)
		}
		var ent struct {
			TenantID string `json:"tenant_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ent)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || ent.TenantID == "" {
			t.Fatalf("run %d: GET /v1/entitlements with the printed key = %d (%v, tenant %q); output:\n%s", run, resp.StatusCode, err, ent.TenantID, out.String())
		}
		tenantID = ent.TenantID

		// The printed check, as curl -d sends it (a form content type).
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/check", strings.NewReader(`{"cost":1}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("run %d: POST /v1/check: %v", run, err)
		}
		var chk struct {
			Allowed bool `json:"allowed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&chk)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || !chk.Allowed || resp.Header.Get("RateLimit") == "" {
			t.Fatalf("run %d: POST /v1/check with the printed key = %d (%v, allowed %v, RateLimit %q)", run, resp.StatusCode, err, chk.Allowed, resp.Header.Get("RateLimit"))
		}
		if !strings.Contains(out.String(), `-d '{"cost":1}' http://`+addr+`/v1/check`) {
			t.Fatalf("run %d: the output shows no POST /v1/check:\n%s", run, out.String())
		}

		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/admin/v1/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("run %d: GET /admin/v1/tenants: %v", run, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("run %d: GET /admin/v1/tenants with the printed admin token = %d", run, resp.StatusCode)
		}

		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
				t.Fatalf("run %d: run.sh after SIGTERM: %v (status %d), want 143; output:\n%s", run, err, code, out.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d: run.sh did not stop within 30s of SIGTERM; output:\n%s", run, out.String())
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("run %d: the api still listens on %s after run.sh stopped", run, addr)
		}
		logs, _ := os.ReadFile(filepath.Join(dataDir, "worker.log"))
		if strings.Count(string(logs), `"msg":"worker stopped"`) != run {
			t.Fatalf("run %d: the worker did not stop cleanly; worker.log:\n%s", run, logs)
		}
	}

	saved, err := os.ReadFile(filepath.Join(dataDir, "admin_token"))
	if err != nil {
		t.Fatalf("admin token file: %v", err)
	}
	if tokens[0] != tokens[1] || strings.TrimSpace(string(saved)) != tokens[0] || !strings.HasPrefix(tokens[0], "tga_") {
		t.Fatalf("admin tokens %q and %q, file %q: want one stable generated tga_ token", tokens[0], tokens[1], saved)
	}
}

// waitForLine polls output for re and returns its first group.
func waitForLine(t *testing.T, output func() string, re string, exited <-chan error) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(output()); m != nil {
			return m[1]
		}
		select {
		case err := <-exited:
			t.Fatalf("run.sh exited (%v) before printing %q; output:\n%s", err, re, output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("run.sh printed no %q within 90s; output:\n%s", re, output())
	return ""
}

// freeAddr returns a loopback address nobody listens on right now, below
// the kernel's ephemeral range (redistest.FreePort says why): tests here
// check that nothing answers on a port after run.sh stopped, and a port
// the kernel could hand to another process would make that a coin toss.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}
