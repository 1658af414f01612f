package browser_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// whyPageRow is one row of the "Why these limits" panel as Chromium shows it.
type whyPageRow struct {
	Policy  string   `json:"policy"`
	Title   string   `json:"title"`
	Value   string   `json:"value"`
	Kinds   []string `json:"kinds"`
	Sources []string `json:"sources"`
	Links   []string `json:"links"`
}

// readWhy reads the panel off the page in Chromium.
func readWhy(t *testing.T, raw string) map[string]whyPageRow {
	t.Helper()
	var rows []whyPageRow
	if err := json.Unmarshal([]byte(raw), &rows); err != nil {
		t.Fatalf("panel rows %q: %v", raw, err)
	}
	out := map[string]whyPageRow{}
	for _, r := range rows {
		out[r.Policy] = r
	}
	return out
}

const whyRowsJS = `JSON.stringify([...document.querySelectorAll('#why [data-policy]')].map(tr => ({
	policy: tr.dataset.policy,
	title: tr.querySelector('.why-title').textContent.trim(),
	value: tr.querySelector('.why-value').textContent.trim(),
	kinds: [...tr.querySelectorAll('li')].map(li => (li.classList.contains('ignored') ? '!' : '') + li.dataset.kind),
	sources: [...tr.querySelectorAll('li')].map(li => li.textContent.replace(/\s+/g, ' ').trim()),
	links: [...tr.querySelectorAll('li a')].map(a => a.getAttribute('href')),
})))`

// In Chromium: alice grants an override in the console, and the tenant
// page's "Why these limits" panel shows every limit in force with the
// figures the limiter enforces and their sources: the subscription and the
// Stripe event that set it, the plan and its version, seats, an add-on,
// an add-on that changes nothing, and the override with its reason and
// its creator.
func TestBrowserWhyTheseLimits(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	team := uniq("team")
	b.Plan(t, catalogue.PlanInput{Key: team, Name: "Team", Rate: &catalogue.RateInput{PerSecond: ptr(20.0), Burst: ptr[int64](200)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000), PerSeat: true}, "exports": {Limit: ptr[int64](50), Mode: "soft"}}})
	if _, err := b.Cat.PatchPlan(b.Ctx, team, func(in *catalogue.PlanInput) error { in.Concurrency = ptr[int64](4); return nil }); err != nil {
		t.Fatal(err)
	}
	packs, uploads := uniq("price_pack"), uniq("price_up")
	if _, _, err := b.Cat.PutAddon(b.Ctx, packs, catalogue.AddonInput{Name: "Request pack", Quotas: map[string]int64{"requests": 10000}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Cat.PutAddon(b.Ctx, uploads, catalogue.AddonInput{Name: "Uploads", Quotas: map[string]int64{"uploads": 5}}); err != nil {
		t.Fatal(err)
	}
	tn := b.Tenant(t, "Why Co", team)
	sub, evt := uniq("sub"), uniq("evt")
	if _, err := b.Pool.Exec(b.Ctx, `
		INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end, plan_quantity, last_event_id)
		VALUES ($1, $2, 'cus_why', 'active', now() - interval '1 day', now() + interval '29 days', 5, $3)`, sub, tn.ID, evt); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(b.Ctx, `INSERT INTO subscription_items (subscription_id, item_id, price_id, quantity) VALUES ($1, 'si_1', $2, 1), ($1, 'si_2', $3, 2)`,
		sub, packs, uploads); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ents.BumpAndPublish(b.Ctx, tn.ID, "subscription fixture"); err != nil {
		t.Fatal(err)
	}

	base := b.srv.URL
	admin := b.consoleTab(t, chrome, b.Alice)
	step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+tn.ID))
	do(t, admin, "fill override",
		chromedp.SetValue(chromedp.CSS("#ov-meter"), "requests"),
		chromedp.SetValue(chromedp.CSS("#ov-extra"), "500"),
		chromedp.SetValue(chromedp.CSS("#ov-reason"), "launch week"),
		chromedp.SetValue(chromedp.CSS("#ov-days"), "7"))
	if st := step(t, admin, "grant override", chromedp.Submit(chromedp.CSS("#ov-reason"))); st != http.StatusOK {
		t.Fatalf("override: %d", st)
	}
	rows := readWhy(t, run(t, admin, "panel", chromedp.Evaluate[string](whyRowsJS)))

	// The figures are the enforced snapshot's.
	snap, err := b.Ents.SnapshotFromPostgres(b.Ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Quotas["requests"].Limit != 15500 || snap.Concurrency != 4 {
		t.Fatalf("fixture: snapshot %+v", snap)
	}
	want := map[string]string{
		"rate":           "20/s, burst 200",
		"concurrency":    strconv.FormatInt(snap.Concurrency, 10) + " at once",
		"quota:requests": "15,500 a period, hard",
		"quota:exports":  "50 a period, soft",
		"quota:uploads":  "unlimited",
	}
	if len(rows) != len(want) {
		t.Fatalf("panel rows %+v, want %v", rows, want)
	}
	for policy, v := range want {
		if rows[policy].Value != v {
			t.Errorf("%s shows %q, want %q", policy, rows[policy].Value, v)
		}
	}
	req := rows["quota:requests"]
	if !slices.Equal(req.Kinds, []string{"subscription", "plan", "seats", "addon", "override"}) {
		t.Fatalf("requests sources %v", req.Kinds)
	}
	mustHave := []string{
		"subscription " + sub + " is active (set by Stripe event " + evt + ")",
		"plan " + team + " (version 2) sets 1,000 per seat",
		"quantity 5 seats × 1,000 = 5,000",
		"add-on Request pack (" + packs + ") × 1: +10,000 = 15,000",
		"override +500 extra = 15,500 hard",
		"(launch week); created by alice",
	}
	joined := strings.Join(req.Sources, "\n")
	for _, s := range mustHave {
		if !strings.Contains(joined, s) {
			t.Errorf("requests sources lack %q:\n%s", s, joined)
		}
	}
	if !slices.Contains(req.Links, "/admin/events/"+evt) || !slices.Contains(req.Links, "/admin/plans/"+team) || !slices.Contains(req.Links, "#overrides") {
		t.Errorf("requests links %v", req.Links)
	}
	if up := rows["quota:uploads"]; !slices.Equal(up.Kinds, []string{"subscription", "plan", "!addon"}) || !strings.Contains(strings.Join(up.Sources, " "), "(no effect)") {
		t.Errorf("uploads row %+v", up)
	}
	// Readable at both widths; the tenant page as a whole is already
	// pictured by TestBrowser, so the picture here is the panel alone.
	for _, width := range []int64{1280, 375} {
		do(t, admin, "viewport", chromedp.EmulateViewport(width, 800))
		if sw := run(t, admin, "scroll width", chromedp.Evaluate[int64](`document.documentElement.scrollWidth`)); sw > width {
			t.Errorf("the page is %d px wide in a %d px viewport", sw, width)
		}
		savePNG(t, "admin-tenant-why-"+strconv.FormatInt(width, 10), run(t, admin, "panel picture", chromedp.Screenshot("#why")))
	}
}
