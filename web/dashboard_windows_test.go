package web

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestDashboardShowsWindowUsage: the dashboard shows each of the plan's
// windows with what the limiter has counted in it (by Redis's clock), out
// of its limit, and a window with nothing left as full.
func TestDashboardShowsWindowUsage(t *testing.T) {
	b := setup(t)
	key := uniq("windash")
	b.plan(t, catalogue.PlanInput{Key: key, Name: "Windowed",
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100000)}},
		Windows: catalogue.WindowInputs{{Name: "hourly", Limit: ptr[int64](5), Length: "1h", Kind: "fixed"},
			{Name: "daily", Limit: ptr[int64](1000), Length: "24h"}}})
	tn := b.tenant(t, "Window Dash", key)
	if _, err := b.ents.BumpAndPublish(b.ctx, tn.ID, "test"); err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Loader: b.ents.ReloadSnapshot, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for range 5 {
		if d, err := lim.Allow(b.ctx, tn.ID, limiter.Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if d, err := lim.Allow(b.ctx, tn.ID, limiter.Request{Cost: 1}); err != nil || d.Allowed || d.Policy != "hourly" {
		t.Fatalf("the sixth in an hour of 5: %+v %v", d, err)
	}
	br := b.browser(t)
	br.loginKey(b.key(t, tn.ID).Key)
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	wantIn(t, page.body, `id="win-h"`,
		`data-window="hourly"`, `5 per 1h, fixed`, `<strong class="used" data-used="5">5</strong> of <span class="limit" data-limit="5">5</span>`, `Full`,
		`data-window="daily"`, `1,000 per 24h, sliding`, `<strong class="used" data-used="5">5</strong> of <span class="limit" data-limit="1000">1,000</span>`, `995 left`)
}
