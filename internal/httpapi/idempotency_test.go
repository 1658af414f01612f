package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// post sends an admin POST with an Idempotency-Key.
func (a *testAPI) postIdem(t *testing.T, path, key string, body any) apiResp {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, a.URL+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := apiResp{Status: res.StatusCode, Header: res.Header, Raw: b}
	_ = json.Unmarshal(b, &r.JSON)
	return r
}

// Running the README's override example twice with one Idempotency-Key
// makes one override: the second answer is the first one again. The same
// key with another body is 422 naming the header; without a key, or with
// another, each POST acts.
func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	plan := a.createPlan(t, map[string]any{"name": "Idem", "quotas": map[string]any{"requests": map[string]any{"limit": 100, "mode": "hard"}}})
	tenant := a.createTenant(t, plan)
	path := "/admin/v1/tenants/" + tenant + "/overrides"
	body := map[string]any{"meter": "requests", "extra": 50, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	key := uniqueName("idem")

	first := a.postIdem(t, path, key, body)
	if first.Status != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", first.Status, first.Raw)
	}
	again := a.postIdem(t, path, key, body)
	if again.Status != http.StatusCreated || !bytes.Equal(again.Raw, first.Raw) || again.Header.Get("Idempotent-Replayed") != "true" ||
		!strings.HasPrefix(again.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("replay: %d %q %s, want the first answer %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw, first.Raw)
	}
	list := a.admin(t, http.MethodGet, path, nil, http.StatusOK)
	if l, _ := list.JSON["overrides"].([]any); len(l) != 1 {
		t.Fatalf("after a replayed POST: %s, want one override", list.Raw)
	}

	other := body
	other["extra"] = 60
	r := a.postIdem(t, path, key, other)
	assertProblem(t, "same key, another body", r, http.StatusUnprocessableEntity)
	if !slices.Contains(r.FieldErrors(), HeaderIdempotencyKey) {
		t.Fatalf("422 does not name the header: %s", r.Raw)
	}
	// A key is bound to its path too.
	r = a.postIdem(t, "/admin/v1/tenants", key, map[string]any{"name": uniqueName("T"), "plan": plan})
	assertProblem(t, "same key, another route", r, http.StatusUnprocessableEntity)

	if r := a.postIdem(t, path, uniqueName("idem"), other); r.Status != http.StatusCreated {
		t.Fatalf("a new key: %d %s", r.Status, r.Raw)
	}
	if r := a.postIdem(t, path, "", other); r.Status != http.StatusCreated {
		t.Fatalf("no key: %d %s", r.Status, r.Raw)
	}
	list = a.admin(t, http.MethodGet, path, nil, http.StatusOK)
	if l, _ := list.JSON["overrides"].([]any); len(l) != 3 {
		t.Fatalf("overrides: %s, want 3", list.Raw)
	}

	// A 4xx is an answer too: kept and replayed.
	bad := map[string]any{"meter": "Bad!", "extra": 1}
	k2 := uniqueName("idem")
	b1, b2 := a.postIdem(t, path, k2, bad), a.postIdem(t, path, k2, bad)
	if b1.Status != http.StatusBadRequest || b2.Status != http.StatusBadRequest || !bytes.Equal(b1.Raw, b2.Raw) || b2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("validation error replay: %d %s / %d %s", b1.Status, b1.Raw, b2.Status, b2.Raw)
	}

	// Keys that are not a short visible token, and secret answers: 400
	// naming the header.
	for _, tc := range []struct{ path, key string }{
		{path, strings.Repeat("k", 256)},
		{path, "tab\there"},
		{"/admin/v1/tenants/" + tenant + "/api-keys", uniqueName("idem")},
	} {
		r := a.postIdem(t, tc.path, tc.key, map[string]any{})
		assertProblem(t, "key "+tc.key[:min(len(tc.key), 10)]+" on "+tc.path, r, http.StatusBadRequest)
		if !slices.Contains(r.FieldErrors(), HeaderIdempotencyKey) {
			t.Fatalf("400 does not name the header: %s", r.Raw)
		}
	}
}
