package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// The console writes numbers and dates one way: 10,000 (not +10000) on the
// add-ons page, "31 Dec 2026 00:00 UTC" (not RFC 3339) in "Why these
// limits"; and the plan page's "Saving this plan changes the limits of N
// tenants" is a caution, not a green success box.
func TestConsoleFormatsNumbersDatesAndWarnsOnPlanReach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	price := uniq("price_pack")
	if _, _, err := b.cat.PutAddon(b.ctx, price, catalogue.AddonInput{Name: "Pack", Quotas: map[string]int64{"requests": 10000}}); err != nil {
		t.Fatal(err)
	}
	tn := b.tenant(t, "Format Co", b.free)
	b.tenant(t, "Format Co 2", b.free)
	until := time.Date(2099, 12, 31, 0, 0, 0, 0, time.UTC)
	if _, err := b.ents.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](500), ExpiresAt: &until}); err != nil {
		t.Fatal(err)
	}
	admin, _ := b.adminBrowser(t)

	page := admin.get("/admin/addons")
	wantStatus(t, page, http.StatusOK, "add-ons")
	if !strings.Contains(page.body, "requests &#43;10,000") || strings.Contains(page.body, "&#43;10000") {
		t.Fatalf("add-ons page does not write 10,000:\n%s", page.body)
	}

	page = admin.get("/admin/tenants/" + tn.ID)
	wantStatus(t, page, http.StatusOK, "tenant")
	if !strings.Contains(page.body, "until 31 Dec 2099 00:00 UTC") || strings.Contains(page.body, "2099-12-31T00:00:00Z") {
		t.Fatalf("the tenant page's explanation does not write the date as the console does:\n%s", page.body)
	}

	page = admin.get("/admin/plans/" + b.free)
	wantStatus(t, page, http.StatusOK, "plan")
	if !strings.Contains(page.body, `id="affects" class="caution"`) {
		t.Fatalf("the plan's reach is not a caution:\n%s", page.body)
	}
}
