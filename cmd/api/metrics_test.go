package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

// metricsAddr is the address of the "api metrics listening" log line.
func metricsAddr(t *testing.T, logs string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "api metrics listening" && rec.Addr != "" {
			return rec.Addr
		}
	}
	return ""
}

func getMetrics(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// By default the api's metrics are on a listener of their own
// (METRICS_ADDR, loopback) and the public port's /metrics is 404: traffic
// per route and the Stripe queue are not shown to whoever reaches the api.
// With METRICS_TOKEN both answer that bearer token only.
func TestServeMetricsOffThePublicPort(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "metrics-token-0123456789"} {
		e := serveEnv(t)
		e["MIGRATE_ON_START"] = "false"
		e["METRICS_TOKEN"] = token
		ctx, cancel := context.WithCancel(t.Context())
		var stdout, stderr testkit.Buffer
		exited := make(chan int, 1)
		go func() { exited <- run(ctx, nil, testkit.Getenv(e), &stdout, &stderr) }()
		addr := listeningAddr(t, stderr.String, exited)
		var maddr string
		testkit.Eventually(t, 30*time.Second, "the api metrics listener", func() bool {
			maddr = metricsAddr(t, stderr.String())
			return maddr != ""
		})
		_, _ = getMetrics(t, "http://"+addr+"/healthz", "") // a request to count

		if token == "" {
			if code, body := getMetrics(t, "http://"+addr+"/metrics", ""); code != http.StatusNotFound || strings.Contains(body, "tollgate_") {
				t.Errorf("public /metrics without METRICS_TOKEN: %d %.200s, want 404", code, body)
			}
			if code, body := getMetrics(t, "http://"+maddr+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "tollgate_http_requests_total") {
				t.Errorf("METRICS_ADDR /metrics: %d %.200s, want 200 with the api's metrics", code, body)
			}
		} else {
			for _, url := range []string{"http://" + addr + "/metrics", "http://" + maddr + "/metrics"} {
				if code, body := getMetrics(t, url, ""); code != http.StatusUnauthorized || strings.Contains(body, "tollgate_") {
					t.Errorf("%s without the token: %d %.200s, want 401", url, code, body)
				}
				if code, body := getMetrics(t, url, e["ADMIN_TOKEN"]); code != http.StatusUnauthorized {
					t.Errorf("%s with the admin token: %d %.200s, want 401", url, code, body)
				}
				if code, body := getMetrics(t, url, token); code != http.StatusOK || !strings.Contains(body, "tollgate_http_requests_total") {
					t.Errorf("%s with METRICS_TOKEN: %d %.200s, want 200", url, code, body)
				}
			}
		}
		cancel()
		if code := waitExit(t, exited, stderr.String); code != exitOK {
			t.Fatalf("exit %d", code)
		}
	}
}
