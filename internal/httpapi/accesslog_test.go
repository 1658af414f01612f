package httpapi

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// accessLines returns the "http request" lines of a JSON log.
func accessLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "http request" {
			out = append(out, m)
		}
	}
	return out
}

func lineWithID(t *testing.T, logs, id string) map[string]any {
	t.Helper()
	for _, l := range accessLines(t, logs) {
		if l["request_id"] == id {
			return l
		}
	}
	t.Fatalf("no access log line with request_id %q in:\n%s", id, logs)
	return nil
}

// Every request gets one access log line with its request id (the caller's
// X-Request-Id, or a made one, echoed on the response), the route template,
// status, tenant and the limiter's decision, so that a 429 a customer
// reports by its X-Request-Id can be found.
func TestAccessLogNamesRequestRouteTenantAndDecision(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	logs := &logBuffer{}
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{log: slog.New(slog.NewJSONHandler(logs, nil))})
	plan := in.newPlan(t, map[string]any{"per_second": 0.01, "burst": 1}, nil)
	tenant, key := in.newTenant(t, plan)

	send := func(method, path, token, id string, body string) *http.Response {
		req, _ := http.NewRequest(method, in.ts.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if id != "" {
			req.Header.Set(HeaderRequestID, id)
		}
		resp, err := in.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	r := send(http.MethodPost, "/v1/check", key, "req-allowed-1", `{"cost":1}`)
	if r.StatusCode != http.StatusOK || r.Header.Get(HeaderRequestID) != "req-allowed-1" {
		t.Fatalf("check: %d, X-Request-Id %q", r.StatusCode, r.Header.Get(HeaderRequestID))
	}
	r = send(http.MethodPost, "/v1/check", key, "req-refused-1", `{"cost":1}`)
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get(HeaderRequestID) != "req-refused-1" {
		t.Fatalf("second check: %d, X-Request-Id %q", r.StatusCode, r.Header.Get(HeaderRequestID))
	}
	// No id, or one that is not a short visible token: one is made.
	made := regexp.MustCompile(`^[0-9a-f]{32}$`)
	r = send(http.MethodDelete, "/v1/leases/0b9f1c3e-2a44-4c55-9a66-1e2f3a4b5c6d", key, "", "")
	generated := r.Header.Get(HeaderRequestID)
	if !made.MatchString(generated) {
		t.Fatalf("made request id %q", generated)
	}
	r = send(http.MethodGet, "/healthz", "", strings.Repeat("x", 200), "")
	if id := r.Header.Get(HeaderRequestID); !made.MatchString(id) {
		t.Fatalf("a 200-byte X-Request-Id came back as %q, want a made one", id)
	}

	l := lineWithID(t, logs.String(), "req-allowed-1")
	if l["route"] != "/v1/check" || l["status"] != 200.0 || l["tenant"] != tenant || l["decision"] != "allowed" || l["method"] != "POST" || l["level"] != "INFO" {
		t.Fatalf("allowed check's line: %v", l)
	}
	l = lineWithID(t, logs.String(), "req-refused-1")
	if l["route"] != "/v1/check" || l["status"] != 429.0 || l["tenant"] != tenant || l["decision"] != "refused" || l["policy"] != "rate" {
		t.Fatalf("refused check's line: %v", l)
	}
	// The route template, never the raw path with its id.
	l = lineWithID(t, logs.String(), generated)
	if l["route"] != "/v1/leases/:id" || l["tenant"] != tenant {
		t.Fatalf("lease release's line: %v", l)
	}
	if _, ok := l["duration_ms"].(float64); !ok {
		t.Fatalf("no duration_ms: %v", l)
	}
}
