package browser_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// In Chromium: the tenant page's "Why these limits" panel shows each of
// the plan's windows as the limiter enforces it, after the rate and
// concurrency, with the plan as its source.
func TestBrowserWhyTheseLimitsShowsWindows(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	key := uniq("winwhy")
	b.Plan(t, catalogue.PlanInput{Key: key, Name: "Windowed",
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100000)}},
		Windows: catalogue.WindowInputs{{Name: "hourly", Limit: ptr[int64](5000), Length: "1h", Kind: "fixed"},
			{Name: "per-minute", Limit: ptr[int64](60), Length: "60s"}}})
	tn := b.Tenant(t, "Window Co", key)

	admin := b.consoleTab(t, chrome, b.Alice)
	step(t, admin, "tenant page", chromedp.Navigate(b.srv.URL+"/admin/tenants/"+tn.ID))
	rows := readWhy(t, run(t, admin, "panel", chromedp.Evaluate[string](whyRowsJS)))
	for policy, want := range map[string][2]string{
		"window:hourly":     {"Window: hourly", "5,000 per 1h, fixed"},
		"window:per-minute": {"Window: per-minute", "60 per 1m, sliding"},
	} {
		r := rows[policy]
		if r.Title != want[0] || r.Value != want[1] || !slices.Equal(r.Kinds, []string{"plan"}) {
			t.Errorf("%s: %+v, want %q %q from the plan", policy, r, want[0], want[1])
		}
		if !strings.Contains(strings.Join(r.Sources, " "), "plan "+key) {
			t.Errorf("%s: sources %v name no plan", policy, r.Sources)
		}
	}
}
