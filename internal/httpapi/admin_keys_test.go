package httpapi

import (
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
)

func TestAPIKeysIssueListRevoke(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{Deps: nil})
	// A second instance of the same deployment: same database, same Redis prefix.
	b := newTestAPI(t, testAPIOptions{Prefix: a.Prefix})
	tenant := a.createTenant(t, a.createPlan(t, map[string]any{}))

	r := a.admin(t, "POST", "/admin/v1/tenants/"+tenant+"/api-keys", map[string]any{"name": "backend"}, http.StatusCreated)
	key, id, prefix := r.JSON["key"].(string), r.JSON["id"].(string), r.JSON["prefix"].(string)
	if !strings.HasPrefix(key, "tg_") || prefix != key[:12] || r.JSON["created_at"] == nil {
		t.Fatalf("issued: %s", r.Raw)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "no-store" {
		t.Fatalf("Cache-Control %q", cc)
	}
	// Without a body, too.
	a.admin(t, "POST", "/admin/v1/tenants/"+tenant+"/api-keys", nil, http.StatusCreated)

	list := a.admin(t, "GET", "/admin/v1/tenants/"+tenant+"/api-keys", nil, http.StatusOK)
	if strings.Contains(string(list.Raw), key) || strings.Contains(string(list.Raw), key[12:]) {
		t.Fatal("the list shows the key")
	}
	if keys := list.JSON["api_keys"].([]any); len(keys) != 2 {
		t.Fatalf("list: %s", list.Raw)
	}

	// Both instances accept the key (and b now has it cached).
	for _, inst := range []*testAPI{a, b} {
		if r := inst.do(t, "GET", "/v1/entitlements", key, nil); r.Status != http.StatusOK || r.JSON["tenant_id"] != tenant {
			t.Fatalf("entitlements with a fresh key: %d %s", r.Status, r.Raw)
		}
	}
	// Bogus and missing keys.
	for _, bad := range []string{"", "tg_" + strings.Repeat("Z", 43), "nonsense", key + "x", testAdminToken} {
		assertProblem(t, "key "+bad, a.do(t, "GET", "/v1/entitlements", bad, nil), http.StatusUnauthorized)
	}

	a.admin(t, "DELETE", "/admin/v1/api-keys/"+id, nil, http.StatusNoContent)
	assertProblem(t, "revoked key, same instance", a.do(t, "GET", "/v1/entitlements", key, nil), http.StatusUnauthorized)
	start := time.Now()
	testkit.Eventually(t, time.Second, "revoked key refused by the second instance", func() bool {
		return b.do(t, "GET", "/v1/entitlements", key, nil).Status == http.StatusUnauthorized
	})
	t.Logf("revocation reached the second instance in %s", time.Since(start))
	assertProblem(t, "revoked key, second instance", b.do(t, "GET", "/v1/entitlements", key, nil), http.StatusUnauthorized)
	// Revoking again is fine; the list shows it revoked.
	a.admin(t, "DELETE", "/admin/v1/api-keys/"+id, nil, http.StatusNoContent)
	if !strings.Contains(string(a.admin(t, "GET", "/admin/v1/tenants/"+tenant+"/api-keys", nil, 200).Raw), `"revoked_at":"`) {
		t.Fatal("list does not show the revocation")
	}
}

// TestRawKeyNeverStoredLoggedOrShownAgain dumps every table and every log
// line after a key's whole life and looks for the key.
func TestRawKeyNeverStoredLoggedOrShownAgain(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	tenant := a.createTenant(t, a.createPlan(t, map[string]any{}))
	key, id := a.issueKey(t, tenant)
	secret := key[12:] // the part after the visible prefix

	var shown []string
	for i := 0; i < 3; i++ {
		shown = append(shown, string(a.do(t, "GET", "/v1/entitlements", key, nil).Raw))
	}
	shown = append(shown, string(a.do(t, "GET", "/v1/entitlements", key[:len(key)-1]+"Q", nil).Raw))
	shown = append(shown, string(a.admin(t, "GET", "/admin/v1/tenants/"+tenant+"/api-keys", nil, 200).Raw))
	shown = append(shown, string(a.admin(t, "GET", "/admin/v1/tenants/"+tenant, nil, 200).Raw))
	a.admin(t, "DELETE", "/admin/v1/api-keys/"+id, nil, http.StatusNoContent)
	shown = append(shown, string(a.do(t, "GET", "/v1/entitlements", key, nil).Raw))

	rows, err := a.Pool.Query(t.Context(), `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	if rows.Err() != nil || len(tables) < 10 {
		t.Fatalf("tables %v: %v", tables, rows.Err())
	}
	var dump strings.Builder
	for _, table := range tables {
		var text string
		if err := a.Pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM "`+table+`" t`).Scan(&text); err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		dump.WriteString(text)
	}
	if !strings.Contains(dump.String(), id) {
		t.Fatal("the dump does not even hold the key's row; the test would prove nothing")
	}
	for where, text := range map[string]string{"database": dump.String(), "logs": a.Logs.String(), "responses": strings.Join(shown, "\n")} {
		for _, needle := range []string{secret, hex.EncodeToString([]byte(secret))} {
			if strings.Contains(text, needle) {
				t.Errorf("the raw key is in the %s", where)
			}
		}
	}
	if !strings.Contains(a.Logs.String(), "api key issued") {
		t.Fatal("no log captured; the log check would prove nothing")
	}
	// Nor in Redis.
	keys, err := a.RDB.Keys(t.Context(), a.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if v, err := a.RDB.Get(t.Context(), k).Result(); err == nil && strings.Contains(v, secret) {
			t.Errorf("the raw key is in Redis at %s", k)
		}
	}
}
