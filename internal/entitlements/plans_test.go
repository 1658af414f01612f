package entitlements_test

import (
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

func fieldsOf(err error) []string {
	e, ok := apperr.As(err)
	if !ok {
		return nil
	}
	var out []string
	for _, f := range e.Fields {
		out = append(out, f.Field)
	}
	return out
}

func TestPlanInputValidate(t *testing.T) {
	ok := func() entitlements.PlanInput {
		return entitlements.PlanInput{Key: "pro", Name: "Pro",
			Rate:   &entitlements.RateInput{PerSecond: ptr(20.0), Burst: ptr[int64](200)},
			Quotas: map[string]*entitlements.QuotaInput{"requests": {Limit: ptr[int64](10), Mode: "hard"}}}
	}
	cases := []struct {
		name   string
		mutate func(*entitlements.PlanInput)
		fields []string
	}{
		{"valid", func(*entitlements.PlanInput) {}, nil},
		{"empty key", func(in *entitlements.PlanInput) { in.Key = "" }, []string{"key"}},
		{"upper-case key", func(in *entitlements.PlanInput) { in.Key = "Pro" }, []string{"key"}},
		{"key too long", func(in *entitlements.PlanInput) { in.Key = string(make([]byte, 65)) }, []string{"key"}},
		{"negative rate", func(in *entitlements.PlanInput) { in.Rate.PerSecond = ptr(-1.0) }, []string{"rate.per_second"}},
		{"NaN rate", func(in *entitlements.PlanInput) { in.Rate.PerSecond = ptr(math.NaN()) }, []string{"rate.per_second"}},
		{"rate without per_second", func(in *entitlements.PlanInput) { in.Rate.PerSecond = nil }, []string{"rate.per_second"}},
		{"zero burst", func(in *entitlements.PlanInput) { in.Rate.Burst = ptr[int64](0) }, []string{"rate.burst"}},
		{"negative concurrency", func(in *entitlements.PlanInput) { in.Concurrency = ptr[int64](-1) }, []string{"concurrency"}},
		{"negative quota", func(in *entitlements.PlanInput) { in.Quotas["requests"].Limit = ptr[int64](-5) }, []string{"quotas.requests.limit"}},
		{"quota without limit", func(in *entitlements.PlanInput) { in.Quotas["requests"].Limit = nil }, []string{"quotas.requests.limit"}},
		{"bad mode", func(in *entitlements.PlanInput) { in.Quotas["requests"].Mode = "maybe" }, []string{"quotas.requests.mode"}},
		{"bad meter", func(in *entitlements.PlanInput) {
			in.Quotas["Bad Meter"] = &entitlements.QuotaInput{Limit: ptr[int64](1)}
		}, []string{"quotas.Bad Meter"}},
		{"empty feature", func(in *entitlements.PlanInput) { in.Features = []string{"ok", ""} }, []string{"features[1]"}},
		{"valid windows", func(in *entitlements.PlanInput) {
			in.Windows = entitlements.WindowInputs{{Name: "hourly", Limit: ptr[int64](5000), Length: "1h", Kind: "fixed"},
				{Name: "per-minute", Limit: ptr[int64](60), Length: "1m"}}
		}, nil},
		{"bad windows", func(in *entitlements.PlanInput) {
			in.Windows = entitlements.WindowInputs{
				{Name: "Hourly", Limit: ptr[int64](1), Length: "1h"},
				{Name: "a", Limit: ptr[int64](0), Length: "500ms", Kind: "rolling"},
				{Name: "a", Length: "32d"},
				{Name: "b", Limit: ptr[int64](-1), Length: "745h"},
				{Name: "rate", Limit: ptr[int64](1), Length: "1s"},
			}
		}, []string{"windows[0].name", "windows[1].limit", "windows[1].length", "windows[1].kind",
			"windows[2].name", "windows[2].limit", "windows[2].length", "windows[3].limit", "windows[3].length", "windows[4].name"}},
		{"too many windows", func(in *entitlements.PlanInput) {
			for i := range 11 {
				in.Windows = append(in.Windows, entitlements.WindowInput{Name: string(rune('a' + i)), Limit: ptr[int64](1), Length: "1h"})
			}
		}, []string{"windows"}},
		{"several at once", func(in *entitlements.PlanInput) {
			in.Key = "!"
			in.Concurrency = ptr[int64](-2)
		}, []string{"key", "concurrency"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := ok()
			tc.mutate(&in)
			err := in.Validate()
			if tc.fields == nil {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if apperr.CodeOf(err) != apperr.Invalid {
				t.Fatalf("want Invalid, got %v", err)
			}
			if got := fieldsOf(err); !slices.Equal(got, tc.fields) {
				t.Fatalf("fields = %v, want %v", got, tc.fields)
			}
		})
	}
}

func TestCreatePlanDefaultsAndConflicts(t *testing.T) {
	b := setup(t)
	key := uniq("p")
	price := uniq("price")
	p := b.mustPlan(t, entitlements.PlanInput{Key: key, StripePriceID: price,
		Rate:        &entitlements.RateInput{PerSecond: ptr(2.5)},
		Concurrency: ptr[int64](0),
		Quotas:      map[string]*entitlements.QuotaInput{"requests": {Limit: ptr[int64](7)}},
		Features:    []string{"sso", "exports", "sso"}})
	if p.Name != key || p.Rate == nil || p.Rate.Burst != 3 || p.Concurrency != nil ||
		p.Quotas["requests"].Mode != "hard" || !slices.Equal(p.Features, []string{"exports", "sso"}) {
		t.Fatalf("defaults not applied: %+v", p)
	}
	got, err := b.svc.GetPlan(b.ctx, key)
	if err != nil || got.Quotas["requests"].Limit != 7 || got.StripePriceID != price {
		t.Fatalf("GetPlan = %+v, %v", got, err)
	}

	_, err = b.svc.CreatePlan(b.ctx, entitlements.PlanInput{Key: key})
	if apperr.CodeOf(err) != apperr.Conflict || !slices.Equal(fieldsOf(err), []string{"key"}) {
		t.Fatalf("duplicate key: %v", err)
	}
	_, err = b.svc.CreatePlan(b.ctx, entitlements.PlanInput{Key: uniq("p"), StripePriceID: price})
	if apperr.CodeOf(err) != apperr.Conflict || !slices.Equal(fieldsOf(err), []string{"stripe_price_id"}) {
		t.Fatalf("duplicate price: %v", err)
	}
	if _, err := b.svc.GetPlan(b.ctx, "no-such-plan"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown plan: %v", err)
	}
	if _, err := b.svc.GetPlan(b.ctx, "NOT A KEY"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("malformed plan key: %v", err)
	}
}

func TestPatchPlanReachesTenantsAtOnce(t *testing.T) {
	b := setup(t)
	key := uniq("p")
	b.mustPlan(t, entitlements.PlanInput{Key: key, Rate: &entitlements.RateInput{PerSecond: ptr(1.0)},
		Quotas: map[string]*entitlements.QuotaInput{"requests": {Limit: ptr[int64](10)}, "exports": {Limit: ptr[int64](1)}}})
	t1, t2 := b.mustTenant(t, key), b.mustTenant(t, key)
	other := b.mustTenant(t, b.free)

	p, err := b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error {
		in.Quotas["requests"] = &entitlements.QuotaInput{Limit: ptr[int64](99)}
		in.Quotas["exports"] = nil // removes the quota
		in.Rate = nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Rate != nil || p.Quotas["requests"].Limit != 99 || len(p.Quotas) != 1 {
		t.Fatalf("patched plan = %+v", p)
	}
	for _, tn := range []entitlements.Tenant{t1, t2} {
		snap, ok, err := b.store.Snapshot(b.ctx, tn.ID)
		if err != nil || !ok {
			t.Fatalf("snapshot of %s: %v %v", tn.ID, ok, err)
		}
		if snap.Version != 2 || snap.Quotas["requests"].Limit != 99 || snap.Rate != nil {
			t.Fatalf("published snapshot = %+v", snap)
		}
		var reason string
		if err := b.pool.QueryRow(b.ctx, `SELECT reason FROM entitlement_versions WHERE tenant_id = $1 AND version = 2`, tn.ID).Scan(&reason); err != nil {
			t.Fatalf("entitlement_versions row: %v", err)
		}
	}
	if snap, _, _ := b.store.Snapshot(b.ctx, other.ID); snap.Version != 1 {
		t.Fatalf("tenant on another plan was bumped: %+v", snap)
	}

	// A patch that fails validation changes nothing.
	_, err = b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error {
		in.Quotas["requests"].Limit = ptr[int64](-1)
		return nil
	})
	if apperr.CodeOf(err) != apperr.Invalid {
		t.Fatalf("invalid patch: %v", err)
	}
	_, err = b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error { in.Key = "renamed"; return nil })
	if !slices.Equal(fieldsOf(err), []string{"key"}) {
		t.Fatalf("key change: %v", err)
	}
	if got, _ := b.svc.GetPlan(b.ctx, key); got.Quotas["requests"].Limit != 99 {
		t.Fatalf("failed patch changed the plan: %+v", got)
	}
	if _, err := b.svc.PatchPlan(b.ctx, "no-such-plan", func(*entitlements.PlanInput) error { return nil }); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown plan: %v", err)
	}
}

// Patching the default plan reaches tenants sent to it by their
// subscription status, not only those assigned to it.
func TestPatchDefaultPlanReachesFallenBackTenants(t *testing.T) {
	b := setup(t)
	paid := uniq("paid")
	b.mustPlan(t, entitlements.PlanInput{Key: paid})
	tn := b.mustTenant(t, paid)
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status) VALUES ($1, $2, 'cus_y', 'canceled')`, uniq("sub"), tn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.PatchPlan(b.ctx, b.free, func(in *entitlements.PlanInput) error {
		in.Quotas["requests"].Limit = ptr[int64](5)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	snap, ok, err := b.store.Snapshot(b.ctx, tn.ID)
	if err != nil || !ok || snap.Plan != b.free || snap.Version != 2 || snap.Quotas["requests"].Limit != 5 {
		t.Fatalf("fallen-back tenant after default plan patch: %+v %v %v", snap, ok, err)
	}
}

func TestPlanWindowsAreStoredAndPatchedWhole(t *testing.T) {
	b := setup(t)
	key := uniq("p")
	p := b.mustPlan(t, entitlements.PlanInput{Key: key, Windows: entitlements.WindowInputs{
		{Name: "hourly", Limit: ptr[int64](5000), Length: "60m"},
		{Name: "daily", Limit: ptr[int64](50000), Length: "24h", Kind: "fixed"}}})
	want := []entitlements.PlanWindow{{Name: "hourly", Limit: 5000, Length: "1h", Kind: "sliding"},
		{Name: "daily", Limit: 50000, Length: "24h", Kind: "fixed"}}
	if !slices.Equal(p.Windows, want) {
		t.Fatalf("created windows = %+v, want %+v", p.Windows, want)
	}
	got, err := b.svc.GetPlan(b.ctx, key)
	if err != nil || !slices.Equal(got.Windows, want) {
		t.Fatalf("GetPlan windows = %+v, %v", got.Windows, err)
	}
	// A patch's list replaces the stored one whole: the entry it gives
	// keeps nothing of the stored first entry (its kind, its length).
	p, err = b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error {
		return json.Unmarshal([]byte(`{"windows": [{"name": "minute", "limit": 60, "length": "1m"}]}`), in)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []entitlements.PlanWindow{{Name: "minute", Limit: 60, Length: "1m", Kind: "sliding"}}; !slices.Equal(p.Windows, want) {
		t.Fatalf("patched windows = %+v, want %+v", p.Windows, want)
	}
	// A patch without windows keeps them; null removes them.
	p, err = b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error {
		return json.Unmarshal([]byte(`{"name": "Renamed"}`), in)
	})
	if err != nil || len(p.Windows) != 1 {
		t.Fatalf("patch without windows: %+v, %v", p.Windows, err)
	}
	p, err = b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error {
		return json.Unmarshal([]byte(`{"windows": null}`), in)
	})
	if err != nil || len(p.Windows) != 0 || p.Windows == nil {
		t.Fatalf("windows null: %#v, %v", p.Windows, err)
	}
	// A bad window in a patch names its field.
	_, err = b.svc.PatchPlan(b.ctx, key, func(in *entitlements.PlanInput) error {
		return json.Unmarshal([]byte(`{"windows": [{"name": "x", "limit": 1, "length": "forever"}]}`), in)
	})
	if apperr.CodeOf(err) != apperr.Invalid || !slices.Equal(fieldsOf(err), []string{"windows[0].length"}) {
		t.Fatalf("bad window length: %v", err)
	}
}
