package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// A plan quota's "notify" (percentages, or {"units": n}) is stored, shown
// in the object form and kept by a patch of another field; bad entries are
// 400s naming quotas.<meter>.notify[i]; an override takes its own.
func TestQuotaNotifyThresholds(t *testing.T) {
	a := newTestAPI(t, testAPIOptions{})
	key := uniqueName("notify")
	r := a.admin(t, "POST", "/admin/v1/plans", map[string]any{"key": key,
		"quotas": map[string]any{"requests": map[string]any{"limit": 1000, "notify": []any{100, 50, map[string]any{"units": 900}}}}}, http.StatusCreated)
	want := `[{"percent":50},{"percent":100},{"units":900}]`
	got := func(r apiResp) string {
		b, _ := json.Marshal(r.JSON["quotas"].(map[string]any)["requests"].(map[string]any)["notify"])
		return string(b)
	}
	if got(r) != want {
		t.Fatalf("created notify %s, want %s", got(r), want)
	}
	r = a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"name": "Notify"}, http.StatusOK)
	if got(r) != want {
		t.Fatalf("after a patch of the name: %s", got(r))
	}
	for _, tc := range []struct {
		notify any
		field  string
	}{
		{[]any{0}, "quotas.requests.notify[0]"},
		{[]any{80, 101}, "quotas.requests.notify[1]"},
		{[]any{80, 80}, "quotas.requests.notify[1]"},
		{[]any{"80%"}, "quotas.requests.notify[0]"},
		{[]any{map[string]any{"percent": 50, "units": 5}}, "quotas.requests.notify[0]"},
		{[]any{map[string]any{"units": -5}}, "quotas.requests.notify[0]"},
		{[]any{map[string]any{"unit": 5}}, "quotas.requests.notify[0]"},
		{[]any{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "quotas.requests.notify"},
	} {
		r := a.admin(t, "POST", "/admin/v1/plans", map[string]any{"key": uniqueName("bad"),
			"quotas": map[string]any{"requests": map[string]any{"limit": 10, "notify": tc.notify}}}, http.StatusBadRequest)
		if !slices.Contains(r.FieldErrors(), tc.field) {
			t.Errorf("notify %v: errors %v, want %s", tc.notify, r.FieldErrors(), tc.field)
		}
	}
	tenant := a.createTenant(t, key)
	o := a.admin(t, "POST", "/admin/v1/tenants/"+tenant+"/overrides", map[string]any{"meter": "requests", "notify": []any{95}}, http.StatusCreated)
	if b, _ := json.Marshal(o.JSON["notify"]); string(b) != `[{"percent":95}]` {
		t.Errorf("override notify %s", b)
	}
	bad := a.admin(t, "POST", "/admin/v1/tenants/"+tenant+"/overrides", map[string]any{"meter": "requests", "notify": []any{500}}, http.StatusBadRequest)
	if !slices.Contains(bad.FieldErrors(), "notify[0]") {
		t.Errorf("override errors %v, want notify[0]", bad.FieldErrors())
	}
}
