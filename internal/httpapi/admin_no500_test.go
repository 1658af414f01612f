package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestNoClientInputGives500 throws odd bodies, paths and parameters at the
// entitlements routes: every answer must be a 4xx problem, never a 500.
func TestNoClientInputGives500(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	plan := a.createPlan(t, map[string]any{})
	tenant := a.createTenant(t, plan)
	key, _ := a.issueKey(t, tenant)
	bodies := []string{
		``, `null`, `[]`, `"str"`, `42`, `{}`, `{"key": null}`, `{"key": 5}`, `{"key": "` + strings.Repeat("a", 65) + `"}`,
		`{"key": "ok", "rate": "fast"}`, `{"key": "ok", "rate": {"per_second": 1e400}}`, `{"key": "ok", "rate": {"per_second": 1e300}}`,
		`{"key": "ok", "concurrency": 1e30}`, `{"key": "ok", "concurrency": 9223372036854775808}`,
		`{"key": "ok", "quotas": []}`, `{"key": "ok", "quotas": {"x": null}}`, `{"key": "ok", "quotas": {"": {"limit": 1}}}`,
		`{"key": "ok", "quotas": {"requests": {"limit": 9223372036854775807, "mode": "hard"}}, "features": [null]}`,
		`{"key": "ok", "name": "\u0000"}`, `{"name": "a\u0000b", "plan": "free"}`, `{"name": "x", "stripe_customer_id": "\u0000"}`,
		`{"key": "ok", "stripe_price_id": "\u0000"}`, `{"key": "ok", "features": ["\ud800"]}`, "{\"key\": \"\xff\xfe\"}",
		`{"plan": null}`, `{"plan": "` + strings.Repeat("p", 1000) + `"}`, `{"name": "` + strings.Repeat("€", 300) + `"}`,
		strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000), `{"key":"a"}garbage`, `{"key":"a",}`,
	}
	paths := []struct{ method, path string }{
		{"POST", "/admin/v1/plans"}, {"PATCH", "/admin/v1/plans/" + plan}, {"POST", "/admin/v1/tenants"},
		{"PUT", "/admin/v1/tenants/" + tenant + "/plan"}, {"POST", "/admin/v1/tenants/" + tenant + "/api-keys"},
	}
	for _, p := range paths {
		for _, body := range bodies {
			r := a.do(t, p.method, p.path, testAdminToken, body)
			if r.Status >= 500 || (r.Status >= 400 && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json")) {
				t.Errorf("%s %s %.60q: %d %s", p.method, p.path, body, r.Status, r.Raw)
			}
		}
	}
	odd := []string{
		"/admin/v1/tenants/%00", "/admin/v1/tenants/'%20OR%201=1", "/admin/v1/tenants/" + strings.Repeat("a", 5000),
		"/admin/v1/tenants/00000000-0000-0000-0000-00000000000g", "/admin/v1/tenants/%ff%fe", "/admin/v1/plans/%00",
		"/admin/v1/plans/%ff", "/admin/v1/plans/" + strings.Repeat("x", 100), "/admin/v1/api-keys/%00",
		"/admin/v1/tenants?q=%00", "/admin/v1/tenants?q=%ff", "/admin/v1/tenants?q=" + strings.Repeat("%25", 300),
		"/admin/v1/tenants?q=%25_%5C", "/admin/v1/tenants?limit=99999999999999999999", "/admin/v1/tenants?limit=-1",
		"/admin/v1/tenants?cursor=" + strings.Repeat("A", 5000), "/admin/v1/tenants?cursor=MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz",
		"/admin/v1/tenants?cursor=OTk5OTk5OTk5OTk5OTk5OTk5OTk5LzAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMA",
		"/admin/v1/tenants/" + tenant + "/api-keys/extra", "/admin/v1/plans/" + plan + "/",
	}
	for _, path := range odd {
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			r := a.do(t, m, path, testAdminToken, `{}`)
			if r.Status >= 500 {
				t.Errorf("%s %s: %d %s", m, path, r.Status, r.Raw)
			}
		}
	}
	for _, token := range []string{"tg_" + strings.Repeat("\u00e9", 20), "tg_%00", strings.Repeat("x", 10000), "tg_" + key[3:] + " extra"} {
		if r := a.do(t, "GET", "/v1/entitlements", token, nil); r.Status >= 500 {
			t.Errorf("token %.20q: %d %s", token, r.Status, r.Raw)
		}
	}
	if strings.Contains(a.Logs.String(), `"level":"ERROR"`) {
		t.Errorf("client input was logged as a server error:\n%s", a.Logs.String())
	}
	if r := a.do(t, "GET", "/v1/entitlements", key, nil); r.Status != http.StatusOK {
		t.Fatalf("the key stopped working: %d", r.Status)
	}
}
