package web

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
)

// In Chromium: a plan change made in the console by alice shows on the
// audit page and on the tenant's own trail, with before and after.
func TestBrowserAudit(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	tn := b.tenant(t, "Trail Co", b.free)
	base := b.srv.URL
	admin := user(t, chrome)
	step(t, admin, "login page", chromedp.Navigate(base+"/admin/login"))
	do(t, admin, "type token", chromedp.SetValue(chromedp.CSS("#token"), b.alice))
	step(t, admin, "login", chromedp.Submit(chromedp.CSS("#token")))
	step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+tn.ID))
	do(t, admin, "choose plan", chromedp.SetValue(chromedp.CSS("#plan-select"), b.pro))
	if st := step(t, admin, "change", chromedp.Click(chromedp.CSS("#change-plan"))); st != http.StatusOK {
		t.Fatalf("plan change: %d", st)
	}
	if st := step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button"))); st != http.StatusOK {
		t.Fatalf("plan change confirmed: %d", st)
	}
	step(t, admin, "audit page", chromedp.Navigate(base+"/admin/audit?tenant="+tn.ID))
	row := run(t, admin, "audit row", chromedp.Evaluate[string](`(() => {
		const r = document.querySelector('tr[data-audit="tenant.plan_change"][data-actor="alice"]');
		if (!r) return '';
		const c = [...r.querySelectorAll('.change')].find(e => e.querySelector('strong').textContent === 'plan');
		return c ? c.querySelector('.before').textContent + ' -> ' + c.querySelector('.after').textContent : 'no plan change';
	})()`))
	if row != b.free+" -> "+b.pro {
		t.Fatalf("audit page row: %q, want %s -> %s", row, b.free, b.pro)
	}
	screenshot(t, admin, "admin-audit-1280", 1280)
	screenshot(t, admin, "admin-audit-375", 375)
	step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+tn.ID))
	if n := run(t, admin, "trail", chromedp.Evaluate[int64](`document.querySelectorAll('#audit tr[data-actor="alice"]').length`)); n != 1 {
		t.Fatalf("tenant page trail has %d entries by alice, want 1", n)
	}
}
