package browser_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// In Chromium, the console's two destructive row actions: Revoke on a key
// and Remove on an override each open a confirmation that shows what the
// action does (the key and the dashboard session it ends; the limit with
// and without the override, against the usage), change nothing until
// confirmed, and once confirmed the tenant page shows the change. Cancel
// goes back with nothing changed. Also the pictures of the tenant list.
func TestBrowserConsoleConfirmations(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	base := b.srv.URL
	tn := b.Tenant(t, "Confirm Co", b.Pro)
	k := b.Key(t, tn.ID)
	ov, err := b.Ents.CreateOverride(b.Ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](500), Reason: "launch week"})
	if err != nil {
		t.Fatal(err)
	}
	b.Use(t, tn.ID, "requests", 100200) // over the limit the override's removal leaves

	// The tenant is on its dashboard, logged in with the key.
	tenant := user(t, chrome)
	step(t, tenant, "login page", chromedp.Navigate(base+"/dashboard/login"))
	do(t, tenant, "type key", chromedp.SetValue(chromedp.CSS("#api_key"), k.Key))
	if st := step(t, tenant, "login", chromedp.Submit(chromedp.CSS("#api_key"))); st != http.StatusOK {
		t.Fatalf("tenant login: %d", st)
	}
	admin := b.consoleTab(t, chrome, b.Admin)
	page := base + "/admin/tenants/" + tn.ID

	t.Run("tenant list", func(t *testing.T) {
		step(t, admin, "list", chromedp.Navigate(base+"/admin/tenants?q=Confirm+Co"))
		if name := text(t, admin, `tr[data-tenant="`+tn.ID+`"] th a`); name != "Confirm Co" {
			t.Fatalf("list shows %q", name)
		}
		screenshot(t, admin, "admin-tenants-1280", 1280)
		screenshot(t, admin, "admin-tenants-375", 375)
	})

	t.Run("revoke a key", func(t *testing.T) {
		keyRow := `#keys tr[data-key="` + k.ID + `"]`
		step(t, admin, "tenant page", chromedp.Navigate(page))
		if st := run(t, admin, "key status", chromedp.AttributeValue(chromedp.CSS(keyRow), "data-status")); st.Value != "active" {
			t.Fatalf("key shows %q before", st.Value)
		}
		if st := step(t, admin, "revoke", chromedp.Click(chromedp.CSS(keyRow+" button"))); st != http.StatusOK {
			t.Fatalf("revoke: %d", st)
		}
		if h := text(t, admin, "#confirm-h"); !strings.Contains(h, "Confirm Co") {
			t.Fatalf("confirmation heading %q", h)
		}
		if got := text(t, admin, `[data-fact="Key"]`); got != k.Prefix+"…" {
			t.Fatalf("the confirmation names key %q, want %s…", got, k.Prefix)
		}
		if got := text(t, admin, `[data-fact="Dashboard sessions it ends"]`); got != "1" {
			t.Fatalf("the confirmation says it ends %q sessions, want 1", got)
		}
		if _, err := b.Keys.Authenticate(b.Ctx, k.Key); err != nil {
			t.Fatalf("the key was revoked before the confirmation: %v", err)
		}
		screenshot(t, admin, "admin-confirm-revoke-1280", 1280)
		screenshot(t, admin, "admin-confirm-revoke-375", 375)
		// Cancel: back on the tenant page, the key untouched.
		step(t, admin, "cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))
		if st := run(t, admin, "key status", chromedp.AttributeValue(chromedp.CSS(keyRow), "data-status")); st.Value != "active" {
			t.Fatalf("key shows %q after Cancel", st.Value)
		}
		step(t, admin, "revoke", chromedp.Click(chromedp.CSS(keyRow+" button")))
		if st := step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button"))); st != http.StatusOK {
			t.Fatalf("confirm: %d", st)
		}
		if msg := text(t, admin, ".notice"); msg != "API key revoked." {
			t.Fatalf("notice %q", msg)
		}
		if st := run(t, admin, "key status", chromedp.AttributeValue(chromedp.CSS(keyRow), "data-status")); st.Value != "revoked" {
			t.Fatalf("key shows %q after the confirmation", st.Value)
		}
		if n := run(t, admin, "revoke buttons", chromedp.Evaluate[int64](`document.querySelectorAll('`+keyRow+` button').length`)); n != 0 {
			t.Fatal("a revoked key still has a Revoke button")
		}
		if _, err := b.Keys.Authenticate(b.Ctx, k.Key); err == nil {
			t.Fatal("the key still works after the confirmed revocation")
		}
		// The tenant's session ended with its key.
		step(t, tenant, "dashboard", chromedp.Navigate(base+"/dashboard"))
		if loc := location(t, tenant); loc != base+"/dashboard/login" {
			t.Fatalf("the tenant's dashboard is at %s after the revocation, want the login page", loc)
		}
	})

	t.Run("remove an override", func(t *testing.T) {
		ovRow := `#overrides tr[data-override="` + ov.ID + `"]`
		step(t, admin, "tenant page", chromedp.Navigate(page))
		if st := step(t, admin, "remove", chromedp.Click(chromedp.CSS(ovRow+" button"))); st != http.StatusOK {
			t.Fatalf("remove: %d", st)
		}
		effect := run(t, admin, "effect", chromedp.Evaluate[string](`[...document.querySelectorAll('#effect tr[data-limit]')].map(r => r.dataset.limit + ': ' + r.dataset.before + ' -> ' + r.dataset.after + (r.dataset.over ? ' over' : '')).join('; ')`))
		if effect != "Quota requests: 100,500 hard -> 100,000 hard over" {
			t.Fatalf("the confirmation shows %q", effect)
		}
		if w := text(t, admin, "#confirm-warning"); !strings.Contains(w, "refused") {
			t.Fatalf("warning %q", w)
		}
		if ovs, _ := b.Ents.ListOverrides(b.Ctx, tn.ID); len(ovs) != 1 {
			t.Fatal("the override was removed before the confirmation")
		}
		screenshot(t, admin, "admin-confirm-override-1280", 1280)
		screenshot(t, admin, "admin-confirm-override-375", 375)
		if st := step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button"))); st != http.StatusOK {
			t.Fatalf("confirm: %d", st)
		}
		if msg := text(t, admin, ".notice"); msg != "Override removed." {
			t.Fatalf("notice %q", msg)
		}
		if n := run(t, admin, "override rows", chromedp.Evaluate[int64](`document.querySelectorAll('#overrides tr[data-override]').length`)); n != 0 {
			t.Fatalf("%d overrides listed after the removal", n)
		}
		got := pageMeters(t, admin)["requests"]
		if got.Limit != "100000" {
			t.Fatalf("the tenant page shows the requests limit %q after the removal, want 100000", got.Limit)
		}
		if ovs, _ := b.Ents.ListOverrides(b.Ctx, tn.ID); len(ovs) != 0 {
			t.Fatal("the override is still there")
		}
	})
}
