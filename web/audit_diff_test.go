package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The Changes column says what changed, one readable field at a time:
// nested fields by path, lists as what was added and removed (never the
// whole array), numbers and dates as the rest of the console writes them,
// and long values clipped.
func TestAuditChangesAreReadable(t *testing.T) {
	t.Parallel()
	before := json.RawMessage(`{"key":"pro","features":["exports","sso"],"quotas":{"requests":{"limit":10000,"mode":"hard"}},
		"expires_at":"2026-12-31T00:00:00Z","name":"` + strings.Repeat("n", 200) + `","keys":[{"id":"a"}]}`)
	after := json.RawMessage(`{"key":"pro","features":["sso","audit_log"],"quotas":{"requests":{"limit":20000,"mode":"hard"},"exports":{"limit":50,"mode":"soft"}},
		"expires_at":"2027-01-31T00:00:00Z","name":"short","keys":[{"id":"a"},{"id":"b"}]}`)
	got := map[string]AuditChange{}
	for _, c := range diffJSON(before, after) {
		got[c.Field] = c
	}
	want := map[string][2]string{
		"features":              {"removed exports", "added audit_log"},
		"quotas.requests.limit": {"10,000", "20,000"},
		"quotas.exports.limit":  {"—", "50"},
		"quotas.exports.mode":   {"—", "soft"},
		"expires_at":            {"31 Dec 2026 00:00 UTC", "31 Jan 2027 00:00 UTC"},
		"keys":                  {"1 item", "2 items"},
	}
	for f, w := range want {
		if c, ok := got[f]; !ok || c.Before != w[0] || c.After != w[1] {
			t.Errorf("%s: %+v, want %q → %q", f, c, w[0], w[1])
		}
	}
	if _, ok := got["key"]; ok {
		t.Error("an unchanged field is listed")
	}
	if n := got["name"]; len([]rune(n.Before)) > maxChangeText || !strings.HasSuffix(n.Before, "…") {
		t.Errorf("a long value is not clipped: %d runes", len([]rune(n.Before)))
	}
	for _, c := range got {
		if strings.ContainsAny(c.Before+c.After, "[{") {
			t.Errorf("%s dumps JSON: %+v", c.Field, c)
		}
	}
}

// A plan change that changes nothing is recorded as that, not as a bare
// "entitlement_version 3 → 4".
func TestAuditNoOpChangeSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Same Co", b.free)
	br := b.browser(t)
	r := reqWithBody(br, http.MethodPut, "/admin/v1/tenants/"+tn.ID+"/plan", b.admin, `{"plan":"`+b.free+`"}`)
	if r.status != http.StatusOK {
		t.Fatalf("PUT plan (the same): %d %s", r.status, r.body)
	}
	admin, _ := b.adminBrowser(t)
	page := admin.get("/admin/audit?tenant=" + tn.ID)
	if !strings.Contains(page.body, "Saved without a change to any limit") {
		t.Fatalf("the audit page does not say the change changed nothing:\n%s", page.body)
	}
	if isNoOp(diffJSON(json.RawMessage(`{"plan":"a","entitlement_version":3}`), json.RawMessage(`{"plan":"b","entitlement_version":4}`))) {
		t.Fatal("a real change counts as a no-op")
	}
}

func reqWithBody(br *browser, method, path, bearer, body string) resp {
	br.t.Helper()
	req, _ := http.NewRequest(method, br.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	return br.do(req)
}
