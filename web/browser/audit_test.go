package browser_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In Chromium: a plan change made in the console by alice shows on the
// audit page and on the tenant's own trail, with before and after.
func TestBrowserAudit(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	tn := b.Tenant(t, "Trail Co", b.Free)
	base := b.srv.URL
	admin := b.consoleTab(t, chrome, b.Alice)
	step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+tn.ID))
	do(t, admin, "choose plan", chromedp.SetValue(chromedp.CSS("#plan-select"), b.Pro))
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
	if row != b.Free+" -> "+b.Pro {
		t.Fatalf("audit page row: %q, want %s -> %s", row, b.Free, b.Pro)
	}
	screenshot(t, admin, "admin-audit-1280", 1280)
	screenshot(t, admin, "admin-audit-375", 375)

	// A plan edit with long lists and values: the Changes column says what
	// was added and removed, and the trail reads at 1280 px without
	// scrolling sideways (it once dumped both arrays whole).
	var feats []string
	for i := 0; i < 30; i++ {
		feats = append(feats, fmt.Sprintf("feature_with_a_rather_long_name_%02d", i))
	}
	raw, _ := json.Marshal(map[string]any{"name": strings.Repeat("Professional ", 12), "features": feats})
	req, _ := http.NewRequest(http.MethodPatch, base+"/admin/v1/plans/"+b.Pro, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+b.Admin)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PATCH plan: %d", res.StatusCode)
	}
	do(t, admin, "viewport", chromedp.EmulateViewport(1280, 800))
	step(t, admin, "audit page", chromedp.Navigate(base+"/admin/audit?plan="+b.Pro))
	wide := run(t, admin, "sideways scroll", chromedp.Evaluate[string](`(() => {
		const box = document.querySelector('.table-scroll');
		const row = document.querySelector('tr[data-audit="plan.edit"]');
		if (!box || !row) return 'no plan.edit row';
		if (box.scrollWidth > box.clientWidth + 1) return 'table ' + box.scrollWidth + ' px in ' + box.clientWidth;
		const text = row.querySelector('td.changes').textContent;
		if (text.includes('[') || text.includes('{')) return 'JSON in the Changes column: ' + text.slice(0, 200);
		if (!text.includes('added feature_with_a_rather_long_name_00')) return 'no added features: ' + text.slice(0, 200);
		return '';
	})()`))
	if wide != "" {
		t.Fatalf("audit trail at 1280 px: %s", wide)
	}
	step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+tn.ID))
	if n := run(t, admin, "trail", chromedp.Evaluate[int64](`document.querySelectorAll('#audit tr[data-actor="alice"]').length`)); n != 1 {
		t.Fatalf("tenant page trail has %d entries by alice, want 1", n)
	}
}
