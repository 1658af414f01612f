package httpapi

import (
	"net/http"
	"slices"
	"testing"
)

// A quota may price one unit (Stripe's unit_amount_decimal and a currency),
// which converts Stripe credit grants whose prices cannot be read from
// Stripe: it reads back as written (the currency lowercased), survives a
// patch of another field, and every malformed pair names its field.
func TestPlanQuotaUnitPrice(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, testAPIOptions{})
	key := uniqueName("priced")
	r := a.admin(t, "POST", "/admin/v1/plans", map[string]any{"key": key, "quotas": map[string]any{
		"tokens": map[string]any{"limit": 100, "mode": "soft", "unit_amount_decimal": "0.0125", "currency": "USD"},
		"images": map[string]any{"limit": 10}}}, http.StatusCreated)
	quota := func(r apiResp, m string) map[string]any {
		t.Helper()
		return r.JSON["quotas"].(map[string]any)[m].(map[string]any)
	}
	if q := quota(r, "tokens"); q["unit_amount_decimal"] != "0.0125" || q["currency"] != "usd" {
		t.Fatalf("created: %s", r.Raw)
	}
	if q := quota(r, "images"); q["unit_amount_decimal"] != nil || q["currency"] != nil {
		t.Fatalf("a quota without a unit price shows one: %s", r.Raw)
	}
	a.admin(t, "PATCH", "/admin/v1/plans/"+key, map[string]any{"name": "Priced"}, http.StatusOK)
	if q := quota(a.admin(t, "GET", "/admin/v1/plans/"+key, nil, http.StatusOK), "tokens"); q["unit_amount_decimal"] != "0.0125" || q["currency"] != "usd" {
		t.Fatalf("after a patch of the name: %v", q)
	}
	for _, tc := range []struct {
		quota  map[string]any
		fields []string
	}{
		{map[string]any{"unit_amount_decimal": "0"}, []string{"quotas.tokens.unit_amount_decimal", "quotas.tokens.currency"}},
		{map[string]any{"unit_amount_decimal": "0.000", "currency": "usd"}, []string{"quotas.tokens.unit_amount_decimal"}},
		{map[string]any{"unit_amount_decimal": "-2", "currency": "usd"}, []string{"quotas.tokens.unit_amount_decimal"}},
		{map[string]any{"unit_amount_decimal": "2.5e3", "currency": "usd"}, []string{"quotas.tokens.unit_amount_decimal"}},
		{map[string]any{"unit_amount_decimal": "1.0000000000001", "currency": "usd"}, []string{"quotas.tokens.unit_amount_decimal"}},
		{map[string]any{"unit_amount_decimal": "2.5"}, []string{"quotas.tokens.currency"}},
		{map[string]any{"unit_amount_decimal": "2.5", "currency": "dollars"}, []string{"quotas.tokens.currency"}},
		{map[string]any{"currency": "usd"}, []string{"quotas.tokens.unit_amount_decimal"}},
		{map[string]any{"unit_amount_decimal": 2.5, "currency": "usd"}, []string{"quotas.tokens.unit_amount_decimal"}},
	} {
		q := map[string]any{"limit": 1}
		for k, v := range tc.quota {
			q[k] = v
		}
		r := a.do(t, "POST", "/admin/v1/plans", testAdminToken, map[string]any{"key": uniqueName("p"), "quotas": map[string]any{"tokens": q}})
		assertProblem(t, "bad unit price", r, http.StatusBadRequest)
		got := r.FieldErrors()
		slices.Sort(got)
		want := slices.Clone(tc.fields)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%v: fields %v, want %v: %s", tc.quota, got, want, r.Raw)
		}
	}
}
