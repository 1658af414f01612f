package notify

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/limiter"
)

// A plan quota's own thresholds ("notify": [50, {"units": 90}]) replace
// the default 80% and 100%; a tenant override's replace the plan's.
func TestPlanAndOverrideThresholds(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	limit := int64(100)
	var notify []catalogue.NotifyInput
	if err := json.Unmarshal([]byte(`[50, {"units": 90}]`), &notify); err != nil {
		t.Fatal(err)
	}
	r := newQuotaRig(t, b, map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard", Notify: notify}}, metering.Options{})
	lines := func() []string {
		var out []string
		for _, e := range eventsOf[QuotaThreshold](t, b, TypeQuotaThreshold) {
			if e.TenantID != r.tenant.ID {
				continue
			}
			if p, ok := e.Threshold["percent"]; ok {
				out = append(out, "percent:"+itoa(p))
			} else {
				out = append(out, "units:"+itoa(e.Threshold["units"]))
			}
		}
		slices.Sort(out)
		return out
	}
	r.allow(t, 85, "")
	r.flush(t)
	if got := lines(); !slices.Equal(got, []string{"percent:50"}) {
		t.Fatalf("at 85 of 100: %v, want only the plan's 50%% (not the default 80%%)", got)
	}
	r.allow(t, 5, "")
	r.flush(t)
	if got := lines(); !slices.Equal(got, []string{"percent:50", "units:90"}) {
		t.Fatalf("at 90: %v, want 50%% and 90 units", got)
	}

	// An override's thresholds for this tenant: 95% (and not the plan's).
	var on []catalogue.NotifyInput
	if err := json.Unmarshal([]byte(`[{"percent": 95}]`), &on); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ents.CreateOverride(ctx, r.tenant.ID, entitlements.OverrideInput{Meter: "requests", Notify: on}); err != nil {
		t.Fatal(err)
	}
	r.allow(t, 5, "")
	r.flush(t)
	if got := lines(); !slices.Equal(got, []string{"percent:50", "percent:95", "units:90"}) {
		t.Fatalf("at 95 with the override: %v, want 95%% added", got)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A limit raised above a crossed threshold re-arms it: 80% of 100 crossed,
// the limit raised to 200 (an override), usage climbing past 80% of 200
// sends 80% again, now against 200; the 100% line, never crossed at 100,
// fires once at 200.
func TestRaisedLimitRearmsACrossedThreshold(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	limit := int64(100)
	r := newQuotaRig(t, b, map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}}, metering.Options{})
	crossed := func() []string {
		var out []string
		for _, e := range eventsOf[QuotaThreshold](t, b, TypeQuotaThreshold) {
			if e.TenantID == r.tenant.ID {
				out = append(out, itoa(e.Threshold["percent"])+"%/"+itoa(e.Limit))
			}
		}
		slices.Sort(out)
		return out
	}
	r.allow(t, 85, "")
	r.flush(t)
	if got := crossed(); !slices.Equal(got, []string{"80%/100"}) {
		t.Fatalf("at 85 of 100: %v", got)
	}
	raised := int64(200)
	if _, err := r.ents.CreateOverride(ctx, r.tenant.ID, entitlements.OverrideInput{Meter: "requests", Limit: &raised, Reason: "upsell"}); err != nil {
		t.Fatal(err)
	}
	// The limiter sees the new limit (the override's publication) before
	// usage goes on; the flush reads it from the same snapshot.
	waitFor(t, "the limiter sees 200", func() bool {
		d, err := r.lim.Allow(ctx, r.tenant.ID, limiter.Request{Peek: true})
		if err != nil {
			return false
		}
		for _, p := range d.Policies {
			if p.Mode != "" && p.Limit == 200 {
				return true
			}
		}
		return false
	})
	if n := r.allow(t, 70, ""); n != 70 { // 155 of 200: under 80%
		t.Fatalf("admitted %d of 70 under the raised limit", n)
	}
	r.flush(t)
	if got := crossed(); !slices.Equal(got, []string{"80%/100"}) {
		t.Fatalf("at 155 of 200: %v", got)
	}
	r.allow(t, 10, "") // 165: over 160
	r.flush(t)
	if got := crossed(); !slices.Equal(got, []string{"80%/100", "80%/200"}) {
		t.Fatalf("at 165 of 200: %v, want 80%% again against 200", got)
	}
	r.allow(t, 40, "") // 200 of 200 (5 refused)
	r.flush(t)
	if got := crossed(); !slices.Equal(got, []string{"100%/200", "80%/100", "80%/200"}) {
		t.Fatalf("at 200 of 200: %v", got)
	}
}
