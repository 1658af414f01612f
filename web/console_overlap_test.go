package web

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A tenant with a re-subscribe beside its old subscription and an add-on
// billed on its own: the console's tenant page shows the current
// subscription (the live one that started last) and lists the old one as
// overlapping and the add-on one as add-ons only.
func TestConsoleShowsOverlappingSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Overlap Inc", b.free)
	now := time.Now().UTC().Truncate(time.Second)
	for _, s := range []struct {
		id, price string
		start     time.Time
		plan      bool
	}{
		{"sub_old_" + tn.ID[:8], "price_old", now.Add(-40 * 24 * time.Hour), true},
		{"sub_new_" + tn.ID[:8], "price_new", now.Add(-time.Hour), true},
		{"sub_addon_" + tn.ID[:8], "", now.Add(-time.Minute), false},
	} {
		var price any
		if s.price != "" {
			price = s.price
		}
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, status, start_date, has_plan_item)
			VALUES ($1, $2, 'cus_overlap', $3, 'active', $4, $5)`, s.id, tn.ID, price, s.start, s.plan); err != nil {
			t.Fatal(err)
		}
	}
	br, _ := b.adminBrowser(t)
	page := br.get("/admin/tenants/" + tn.ID)
	wantStatus(t, page, http.StatusOK, "tenant page")
	// The plan line names the plan version in force (issue 25).
	wantIn(t, page.body, `<span id="plan-version">version 1</span>`)
	sub := page.body[strings.Index(page.body, `id="sub-h"`):]
	current := sub[:strings.Index(sub, "Other subscriptions")]
	if !strings.Contains(current, "sub_new_"+tn.ID[:8]) {
		t.Fatalf("the current subscription must be the one that started last: %s", current)
	}
	others := sub[strings.Index(sub, "Other subscriptions"):]
	if !strings.Contains(others, "sub_old_"+tn.ID[:8]) || !strings.Contains(others, "Overlapping") ||
		!strings.Contains(others, "sub_addon_"+tn.ID[:8]) || !strings.Contains(others, "Add-ons only") {
		t.Fatalf("other subscriptions must list the overlapping one and the add-on one: %s", others)
	}
}
