package catalogue_test

import (
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
)

func TestPlanInputValidate(t *testing.T) {
	ok := func() catalogue.PlanInput {
		return catalogue.PlanInput{Key: "pro", Name: "Pro",
			Rate:   &catalogue.RateInput{PerSecond: ptr(20.0), Burst: ptr[int64](200)},
			Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10), Mode: "hard"}}}
	}
	cases := []struct {
		name   string
		mutate func(*catalogue.PlanInput)
		fields []string
	}{
		{"valid", func(*catalogue.PlanInput) {}, nil},
		{"empty key", func(in *catalogue.PlanInput) { in.Key = "" }, []string{"key"}},
		{"upper-case key", func(in *catalogue.PlanInput) { in.Key = "Pro" }, []string{"key"}},
		{"key too long", func(in *catalogue.PlanInput) { in.Key = string(make([]byte, 65)) }, []string{"key"}},
		{"negative rate", func(in *catalogue.PlanInput) { in.Rate.PerSecond = ptr(-1.0) }, []string{"rate.per_second"}},
		{"NaN rate", func(in *catalogue.PlanInput) { in.Rate.PerSecond = ptr(math.NaN()) }, []string{"rate.per_second"}},
		{"rate without per_second", func(in *catalogue.PlanInput) { in.Rate.PerSecond = nil }, []string{"rate.per_second"}},
		{"zero burst", func(in *catalogue.PlanInput) { in.Rate.Burst = ptr[int64](0) }, []string{"rate.burst"}},
		{"negative concurrency", func(in *catalogue.PlanInput) { in.Concurrency = ptr[int64](-1) }, []string{"concurrency"}},
		{"negative quota", func(in *catalogue.PlanInput) { in.Quotas["requests"].Limit = ptr[int64](-5) }, []string{"quotas.requests.limit"}},
		{"quota without limit", func(in *catalogue.PlanInput) { in.Quotas["requests"].Limit = nil }, []string{"quotas.requests.limit"}},
		{"bad mode", func(in *catalogue.PlanInput) { in.Quotas["requests"].Mode = "maybe" }, []string{"quotas.requests.mode"}},
		{"bad meter", func(in *catalogue.PlanInput) {
			in.Quotas["Bad Meter"] = &catalogue.QuotaInput{Limit: ptr[int64](1)}
		}, []string{"quotas.Bad Meter"}},
		{"empty feature", func(in *catalogue.PlanInput) { in.Features = []string{"ok", ""} }, []string{"features[1]"}},
		{"valid windows", func(in *catalogue.PlanInput) {
			in.Windows = catalogue.WindowInputs{{Name: "hourly", Limit: ptr[int64](5000), Length: "1h", Kind: "fixed"},
				{Name: "per-minute", Limit: ptr[int64](60), Length: "1m"}}
		}, nil},
		{"bad windows", func(in *catalogue.PlanInput) {
			in.Windows = catalogue.WindowInputs{
				{Name: "Hourly", Limit: ptr[int64](1), Length: "1h"},
				{Name: "a", Limit: ptr[int64](0), Length: "500ms", Kind: "rolling"},
				{Name: "a", Length: "32d"},
				{Name: "b", Limit: ptr[int64](-1), Length: "745h"},
				{Name: "rate", Limit: ptr[int64](1), Length: "1s"},
			}
		}, []string{"windows[0].name", "windows[1].limit", "windows[1].length", "windows[1].kind",
			"windows[2].name", "windows[2].limit", "windows[2].length", "windows[3].limit", "windows[3].length", "windows[4].name"}},
		{"too many windows", func(in *catalogue.PlanInput) {
			for i := range 11 {
				in.Windows = append(in.Windows, catalogue.WindowInput{Name: string(rune('a' + i)), Limit: ptr[int64](1), Length: "1h"})
			}
		}, []string{"windows"}},
		{"several at once", func(in *catalogue.PlanInput) {
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
	b := setup(t, catalogue.Options{})
	key := uniq("p")
	price := uniq("price")
	p := b.mustPlan(t, catalogue.PlanInput{Key: key, StripePriceID: price,
		Rate:        &catalogue.RateInput{PerSecond: ptr(2.5)},
		Concurrency: ptr[int64](0),
		Quotas:      map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](7)}},
		Features:    []string{"sso", "exports", "sso"}})
	if p.Name != key || p.Rate == nil || p.Rate.Burst != 3 || p.Concurrency != nil ||
		p.Quotas["requests"].Mode != "hard" || !slices.Equal(p.Features, []string{"exports", "sso"}) {
		t.Fatalf("defaults not applied: %+v", p)
	}
	got, err := b.svc.GetPlan(b.ctx, key)
	if err != nil || got.Quotas["requests"].Limit != 7 || got.StripePriceID != price {
		t.Fatalf("GetPlan = %+v, %v", got, err)
	}

	_, err = b.svc.CreatePlan(b.ctx, catalogue.PlanInput{Key: key})
	if apperr.CodeOf(err) != apperr.Conflict || !slices.Equal(fieldsOf(err), []string{"key"}) {
		t.Fatalf("duplicate key: %v", err)
	}
	_, err = b.svc.CreatePlan(b.ctx, catalogue.PlanInput{Key: uniq("p"), StripePriceID: price})
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

func TestPlanWindowsAreStoredAndPatchedWhole(t *testing.T) {
	b := setup(t, catalogue.Options{})
	key := uniq("p")
	p := b.mustPlan(t, catalogue.PlanInput{Key: key, Windows: catalogue.WindowInputs{
		{Name: "hourly", Limit: ptr[int64](5000), Length: "60m"},
		{Name: "daily", Limit: ptr[int64](50000), Length: "24h", Kind: "fixed"}}})
	want := []catalogue.PlanWindow{{Name: "hourly", Limit: 5000, Length: "1h", Kind: "sliding"},
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
	p, err = b.svc.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		return json.Unmarshal([]byte(`{"windows": [{"name": "minute", "limit": 60, "length": "1m"}]}`), in)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []catalogue.PlanWindow{{Name: "minute", Limit: 60, Length: "1m", Kind: "sliding"}}; !slices.Equal(p.Windows, want) {
		t.Fatalf("patched windows = %+v, want %+v", p.Windows, want)
	}
	// A patch without windows keeps them; null removes them.
	p, err = b.svc.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		return json.Unmarshal([]byte(`{"name": "Renamed"}`), in)
	})
	if err != nil || len(p.Windows) != 1 {
		t.Fatalf("patch without windows: %+v, %v", p.Windows, err)
	}
	p, err = b.svc.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		return json.Unmarshal([]byte(`{"windows": null}`), in)
	})
	if err != nil || len(p.Windows) != 0 || p.Windows == nil {
		t.Fatalf("windows null: %#v, %v", p.Windows, err)
	}
	// A bad window in a patch names its field.
	_, err = b.svc.PatchPlan(b.ctx, key, func(in *catalogue.PlanInput) error {
		return json.Unmarshal([]byte(`{"windows": [{"name": "x", "limit": 1, "length": "forever"}]}`), in)
	})
	if apperr.CodeOf(err) != apperr.Invalid || !slices.Equal(fieldsOf(err), []string{"windows[0].length"}) {
		t.Fatalf("bad window length: %v", err)
	}
}
