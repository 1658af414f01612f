package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func getWith(t *testing.T, c *http.Client, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// Every answer says nosniff (JSON, problems, 404s); HSTS is sent when the
// request came over TLS, directly or as a trusted proxy (TRUSTED_PROXIES)
// says, never on a plain request nor on an untrusted peer's say-so.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
	trusting := newTestAPI(t, testAPIOptions{Deps: func(d *Deps) { d.TrustedProxies = loopback }})
	plain := newTestAPI(t, testAPIOptions{})
	c := http.DefaultClient

	for _, path := range []string{"/healthz", "/v1/usage", "/admin/v1/plans", "/no/such/route", "/metrics"} {
		res := getWith(t, c, trusting.URL+path, nil)
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s (%d): X-Content-Type-Options %q, want nosniff", path, res.StatusCode, got)
		}
		if got := res.Header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("GET %s over plain HTTP: Strict-Transport-Security %q, want none", path, got)
		}
	}
	cases := []struct {
		name   string
		api    *testAPI
		header map[string]string
		hsts   bool
	}{
		{"trusted proxy, X-Forwarded-Proto https", trusting, map[string]string{"X-Forwarded-Proto": "https"}, true},
		{"trusted proxy, Forwarded proto=https", trusting, map[string]string{"Forwarded": "for=203.0.113.7;proto=https"}, true},
		{"trusted proxy, X-Forwarded-Proto http", trusting, map[string]string{"X-Forwarded-Proto": "http"}, false},
		{"trusted proxy, the nearest hop said http", trusting, map[string]string{"X-Forwarded-Proto": "https, http"}, false},
		{"untrusted peer, X-Forwarded-Proto https", plain, map[string]string{"X-Forwarded-Proto": "https"}, false},
		{"untrusted peer, Forwarded proto=https", plain, map[string]string{"Forwarded": "proto=https"}, false},
	}
	for _, tc := range cases {
		res := getWith(t, c, tc.api.URL+"/healthz", tc.header)
		got := res.Header.Get("Strict-Transport-Security")
		if tc.hsts != (got == "max-age=31536000") {
			t.Errorf("%s: Strict-Transport-Security %q, want it %v", tc.name, got, tc.hsts)
		}
	}

	// Directly over TLS.
	ts := httptest.NewTLSServer(plain.Srv)
	t.Cleanup(ts.Close)
	res := getWith(t, ts.Client(), ts.URL+"/healthz", nil)
	if got := res.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
		t.Errorf("over TLS: Strict-Transport-Security %q, want max-age=31536000", got)
	}
	if res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("over TLS: no nosniff")
	}
}

// The public port's /metrics: with a listener of their own (METRICS_ADDR)
// and no METRICS_TOKEN it is 404; with METRICS_TOKEN it answers that bearer
// token only (401 with WWW-Authenticate otherwise).
func TestMetricsOnThePublicPort(t *testing.T) {
	t.Parallel()
	hidden := newTestAPI(t, testAPIOptions{Deps: func(d *Deps) { d.MetricsElsewhere = true }})
	r := hidden.do(t, http.MethodGet, "/metrics", "", nil)
	assertProblem(t, "GET /metrics, metrics elsewhere", r, http.StatusNotFound)
	if strings.Contains(string(r.Raw), "tollgate_") {
		t.Errorf("GET /metrics with metrics elsewhere shows them: %s", r.Raw)
	}

	const tok = "metrics-token-0123456789"
	guarded := newTestAPI(t, testAPIOptions{Deps: func(d *Deps) { d.MetricsElsewhere, d.MetricsToken = true, tok }})
	for _, bad := range []string{"", "wrong-token-0123456789", testAdminToken} {
		r := guarded.do(t, http.MethodGet, "/metrics", bad, nil)
		assertProblem(t, "GET /metrics with token "+bad, r, http.StatusUnauthorized)
		if !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(string(r.Raw), "tollgate_") {
			t.Errorf("GET /metrics with token %q: %v %s", bad, r.Header, r.Raw)
		}
	}
	r = guarded.do(t, http.MethodGet, "/metrics", tok, nil)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Raw), "tollgate_http_requests_total") {
		t.Errorf("GET /metrics with METRICS_TOKEN: %d %.300s", r.Status, r.Raw)
	}
}
