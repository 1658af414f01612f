package browser_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// In Chromium: create a tenant with an external id, see it on its page,
// change it there, and be told next to the field when another tenant has
// the one typed.
func TestBrowserTenantExternalID(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	base := b.srv.URL
	admin := b.consoleTab(t, chrome, b.Admin)

	taken := b.Tenant(t, "Holder Co", b.Free)
	held := "held-" + uniq("x")
	if _, err := b.Ents.UpdateTenant(b.Ctx, taken.ID, entitlements.TenantPatch{ExternalID: entitlements.OptionalString{Set: true, Value: &held}}); err != nil {
		t.Fatal(err)
	}
	ext := "org:" + uniq("b") + "@eu"
	step(t, admin, "new tenant", chromedp.Navigate(base+"/admin/tenants/new"))
	do(t, admin, "fill", chromedp.SetValue(chromedp.CSS("#tn-name"), "Ext Browser Co"),
		chromedp.SetValue(chromedp.CSS("#tn-plan"), b.Free), chromedp.SetValue(chromedp.CSS("#tn-ext"), ext))
	if st := step(t, admin, "create", chromedp.Click(chromedp.CSS("#create-tenant"))); st != http.StatusOK {
		t.Fatalf("create: %d", st)
	}
	if got := text(t, admin, "#tenant-external-id"); got != ext {
		t.Fatalf("tenant page shows external id %q, want %q", got, ext)
	}
	screenshot(t, admin, "admin-tenant-external-id-1280", 1280)
	screenshot(t, admin, "admin-tenant-external-id-375", 375)

	do(t, admin, "type taken", chromedp.SetValue(chromedp.CSS("#ext-id"), held))
	if st := step(t, admin, "save taken", chromedp.Click(chromedp.CSS("#save-external-id"))); st != http.StatusConflict {
		t.Fatalf("taken external id: %d, want 409", st)
	}
	if msg := text(t, admin, "#ext-id-err"); !strings.Contains(msg, "Holder Co") {
		t.Fatalf("the field's error says %q", msg)
	}
	next := "acct_" + uniq("n")
	do(t, admin, "type new", chromedp.SetValue(chromedp.CSS("#ext-id"), next))
	if st := step(t, admin, "save", chromedp.Click(chromedp.CSS("#save-external-id"))); st != http.StatusOK {
		t.Fatalf("save: %d", st)
	}
	if got := text(t, admin, "#tenant-external-id"); got != next {
		t.Fatalf("after saving, the page shows %q, want %q", got, next)
	}
}
