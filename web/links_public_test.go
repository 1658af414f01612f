package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// With PUBLIC_URL set, a dashboard link is whole, from the admin API and
// from the console alike (and the console does not prefix it twice): an
// admin pastes it into a mail, where a path leads nowhere.
func TestDashboardLinksAreAbsoluteUnderPublicURL(t *testing.T) {
	t.Parallel()
	const public = "https://billing.example.com"
	b := setup(t, setupOpts{publicURL: public + "/"})
	tn := b.tenant(t, "Link Co", b.free)
	br := b.browser(t)
	r := reqWith(br, http.MethodPost, "/admin/v1/tenants/"+tn.ID+"/dashboard-links", b.admin)
	var out struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(r.body), &out); err != nil || r.status != http.StatusCreated {
		t.Fatalf("mint: %d %s", r.status, r.body)
	}
	if !strings.HasPrefix(out.URL, public+"/dashboard/login?token=") {
		t.Fatalf("API link %q, want it under %s", out.URL, public)
	}

	admin, tok := b.adminBrowser(t)
	page := admin.post("/admin/tenants/"+tn.ID+"/dashboard-link", url.Values{"csrf": {tok}})
	if page.status != http.StatusCreated || !strings.Contains(page.body, public+"/dashboard/login?token=") || strings.Contains(page.body, public+public) {
		t.Fatalf("console link: %d, want one %s prefix:\n%s", page.status, public, page.body)
	}
}
