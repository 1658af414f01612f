package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// seedLines parses seed-demo's "name: value" lines.
func seedLines(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k] = v
		}
	}
	for _, k := range []string{"api_key", "admin_token", "dashboard", "try"} {
		if m[k] == "" {
			t.Fatalf("seed-demo printed no %q line:\n%s", k, out)
		}
	}
	return m
}

func TestSeedDemoIsIdempotentAndItsKeyWorks(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	e["PUBLIC_URL"] = "http://tollgate.example:8080"
	seed := func() (int, string, string) {
		var stdout, stderr testkit.Buffer
		code := run(t.Context(), []string{"seed-demo"}, testkit.Getenv(e), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	// Two at once, then one more: still one of each.
	var wg sync.WaitGroup
	outs := make([]string, 3)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, errOut := seed()
			if code != exitOK {
				t.Errorf("seed-demo exited %d: %s", code, errOut)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	code, out, errOut := seed()
	if code != exitOK {
		t.Fatalf("seed-demo exited %d: %s", code, errOut)
	}
	outs[2] = out
	lines := seedLines(t, out)
	if !strings.HasPrefix(lines["api_key"], "tg_") || lines["admin_token"] != e["ADMIN_TOKEN"] ||
		lines["dashboard"] != "http://tollgate.example:8080/dashboard" ||
		!strings.Contains(lines["try"], "curl") || !strings.Contains(lines["try"], lines["api_key"]) {
		t.Fatalf("printed:\n%s", out)
	}
	if errOut != "" && strings.Contains(errOut, lines["api_key"][12:]) {
		t.Fatal("the API key was logged")
	}
	keys := map[string]bool{}
	for _, o := range outs {
		keys[seedLines(t, o)["api_key"]] = true
	}
	if len(keys) != 3 {
		t.Fatalf("want a new key per run, got %d distinct", len(keys))
	}

	pool := pgtest.New(t)
	var plans, tenants, apiKeys int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM plans WHERE key IN ('free', 'pro', 'team')`).Scan(&plans); err != nil {
		t.Fatal(err)
	}
	var tenantID string
	if err := pool.QueryRow(t.Context(), `SELECT count(*), min(id::text) FROM tenants WHERE name = 'Demo Co'`).Scan(&tenants, &tenantID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM api_keys WHERE tenant_id = $1`, tenantID).Scan(&apiKeys); err != nil {
		t.Fatal(err)
	}
	if plans != 3 || tenants != 1 || apiKeys != 3 {
		t.Fatalf("after three seeds: %d demo plans, %d demo tenants, %d keys; want 3, 1, 3", plans, tenants, apiKeys)
	}
	rdb, _ := redistest.New(t)
	t.Cleanup(func() { redistest.Clean(context.Background(), rdb, "tg:{t:"+tenantID+"}") })

	// The printed key works against GET /v1/entitlements of a served api.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"serve"}, testkit.Getenv(e), &stdout, &stderr) }()
	addr := listeningAddr(t, stderr.String, exited)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/v1/entitlements", nil)
	req.Header.Set("Authorization", "Bearer "+lines["api_key"])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ent struct {
		TenantID string   `json:"tenant_id"`
		Plan     string   `json:"plan"`
		Features []string `json:"features"`
		Rate     struct {
			PerSecond float64 `json:"per_second"`
			Burst     int64   `json:"burst"`
		} `json:"rate"`
		Concurrency int64 `json:"concurrency"`
		Quotas      map[string]struct {
			Limit int64  `json:"limit"`
			Mode  string `json:"mode"`
		} `json:"quotas"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ent); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/entitlements: %d %v", res.StatusCode, err)
	}
	if ent.TenantID != tenantID || ent.Plan != "pro" || strings.Join(ent.Features, ",") != "exports,sso" ||
		ent.Rate.PerSecond != 20 || ent.Rate.Burst != 200 || ent.Concurrency != 10 ||
		ent.Quotas["requests"].Limit != 100000 || ent.Quotas["exports"].Mode != "soft" {
		t.Fatalf("entitlements of the demo key: %+v", ent)
	}
	cancel()
	waitExit(t, exited, stderr.String)
}
