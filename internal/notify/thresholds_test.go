package notify

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// A plan quota's own thresholds ("notify": [50, {"units": 90}]) replace
// the default 80% and 100%; a tenant override's replace the plan's.
func TestPlanAndOverrideThresholds(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	limit := int64(100)
	var notify []entitlements.NotifyInput
	if err := json.Unmarshal([]byte(`[50, {"units": 90}]`), &notify); err != nil {
		t.Fatal(err)
	}
	r := newQuotaRig(t, b, map[string]*entitlements.QuotaInput{"requests": {Limit: &limit, Mode: "hard", Notify: notify}}, metering.Options{})
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
	var on []entitlements.NotifyInput
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
