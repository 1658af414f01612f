package browser_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

const chromiumPath = "/usr/bin/chromium"

// newChrome starts Debian's Chromium headless with a fresh profile. Without
// it the test skips locally and fails in CI.
func newChrome(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testkit.Unavailable(t, "chromium", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Headless,
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// user is one person at the browser: a tab in a browser context of its own,
// so that each user has its own cookies.
func user(t *testing.T, browserCtx context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return ctx
}

// step runs actions that end in a page load and returns the document's
// HTTP status.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) int64 {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := chromedp.RunResponse(tctx, actions...)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return r.Status
}

func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	return run(t, ctx, "location", chromedp.Location())
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return run(t, ctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// download clicks the link sel and returns the file Chromium saved from
// it and the name the server suggested (Content-Disposition).
func download(t *testing.T, ctx context.Context, sel string) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	events := true
	if _, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, BrowserContextID: chromedp.FromContext(ctx).BrowserContextID,
		DownloadPath: dir, EventsEnabled: &events}); err != nil {
		t.Fatalf("download behaviour: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// Subscribed before the click: the events are buffered from here.
	begun := chromedp.BrowserEvents(tctx, cdpbrowser.DownloadWillBegin)
	progress := chromedp.BrowserEvents(tctx, cdpbrowser.DownloadProgress)
	do(t, ctx, "click "+sel, chromedp.Click(chromedp.CSS(sel)))
	var guid, name string
	for ev, err := range begun {
		if err != nil {
			t.Fatalf("no download began after clicking %s: %v", sel, err)
		}
		guid, name = ev.GUID, ev.SuggestedFilename
		break
	}
	for ev, err := range progress {
		if err != nil {
			t.Fatalf("download of %s: %v", name, err)
		}
		if ev.GUID != guid {
			continue
		}
		if ev.State == cdpbrowser.DownloadProgressStateCanceled {
			t.Fatalf("download of %s canceled", name)
		}
		if ev.State == cdpbrowser.DownloadProgressStateCompleted {
			break
		}
	}
	body, err := os.ReadFile(filepath.Join(dir, guid))
	if err != nil {
		t.Fatalf("downloaded file: %v", err)
	}
	return name, body
}

// screenshot takes a full-page PNG of the current page at the given width.
// It goes to a temporary folder, so a test run leaves the tree as it found
// it; UPDATE_SCREENSHOTS=1 (make screenshots) writes docs/screenshots/name.png.
func screenshot(t *testing.T, ctx context.Context, name string, width int64) {
	t.Helper()
	do(t, ctx, "viewport", chromedp.EmulateViewport(width, 800))
	// Usable at this width: nothing makes the page itself scroll sideways
	// (wide tables scroll inside their own box).
	if sw := run(t, ctx, "scroll width", chromedp.Evaluate[int64](`document.documentElement.scrollWidth`)); sw > width {
		t.Errorf("%s: the page is %d px wide in a %d px viewport", name, sw, width)
	}
	// No button sits past the right edge, hidden in a box that scrolls
	// sideways (a wide table may scroll; its actions must not need it).
	if cut := run(t, ctx, "buttons in view", chromedp.Evaluate[string](`[...document.querySelectorAll('button')]
		.filter(e => {
			const r = e.getBoundingClientRect();
			let right = window.innerWidth;
			for (let a = e.parentElement; a; a = a.parentElement) {
				if (getComputedStyle(a).overflowX !== 'visible') right = Math.min(right, a.getBoundingClientRect().right);
			}
			return r.width > 0 && r.right > right + 1;
		})
		.map(e => e.outerHTML.slice(0, 80)).join('\n')`)); cut != "" {
		t.Errorf("%s: buttons past the right edge at %d px:\n%s", name, width, cut)
	}
	// No table hides a column past the edge of its sideways-scrolling box:
	// at a phone's width a table reads as one block a row (stack-sm)
	// rather than cut off what a billing admin came to read.
	// (A visually hidden header, one pixel clipped, is for screen readers.)
	if cut := run(t, ctx, "cells in view", chromedp.Evaluate[string](`[...document.querySelectorAll('th, td')]
		.filter(e => {
			const r = e.getBoundingClientRect();
			let right = window.innerWidth;
			for (let a = e.parentElement; a; a = a.parentElement) {
				const ar = a.getBoundingClientRect();
				if (ar.width <= 1 || ar.height <= 1) return false;
				if (getComputedStyle(a).overflowX !== 'visible') right = Math.min(right, ar.right);
			}
			return r.width > 0 && r.left < right && r.right > right + 1;
		})
		.map(e => e.outerHTML.slice(0, 80)).join('\n')`)); cut != "" {
		t.Errorf("%s: table cells cut off at the right edge at %d px:\n%s", name, width, cut)
	}
	// Every control has a name people and screen readers can see.
	if bad := run(t, ctx, "labels", chromedp.Evaluate[string](`[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
		.filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
		.map(e => e.outerHTML.slice(0, 80)).join('\n')`)); bad != "" {
		t.Errorf("%s: controls without a label:\n%s", name, bad)
	}
	// The viewport as tall as the page, and two frames for Chromium to
	// paint it: a box that scrolls on its own (the event payload) below the
	// viewport, or resized since its last paint, came out empty in a
	// full-page capture.
	h := run(t, ctx, "page height", chromedp.Evaluate[int64](`document.documentElement.scrollHeight`))
	do(t, ctx, "viewport of the page's height", chromedp.EmulateViewport(width, h))
	run(t, ctx, "painted", chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise))
	savePNG(t, name, run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100)))
	do(t, ctx, "viewport back", chromedp.EmulateViewport(1280, 900))
}

// savePNG writes a picture to a temporary folder, or with
// UPDATE_SCREENSHOTS=1 to docs/screenshots/name.png.
func savePNG(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := t.TempDir()
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		dir = filepath.Join("..", "..", "docs", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(png) > 400<<10 {
		t.Errorf("screenshot %s is %d KiB; keep it small", name, len(png)>>10)
	}
}

// ownPlansOnly makes internal the plans that other tests of the package
// left in the shared database, so that the dashboard's plan offer pictures
// this test's plans alone.
func (b *bundle) ownPlansOnly(t testing.TB, keys ...string) {
	t.Helper()
	plans, err := b.Cat.ListPlans(b.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	internal := func(in *catalogue.PlanInput) error { in.Public = ptr(false); return nil }
	for _, p := range plans {
		if p.Public && !slices.Contains(keys, p.Key) {
			if _, err := b.Cat.PatchPlan(b.Ctx, p.Key, internal); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// pageMeter is one meter as the dashboard shows it.
type pageMeter struct {
	Meter string `json:"meter"`
	Used  string `json:"used"`
	Limit string `json:"limit"`
}

func pageMeters(t *testing.T, ctx context.Context) map[string]pageMeter {
	t.Helper()
	var ms []pageMeter
	raw := run(t, ctx, "read meters", chromedp.Evaluate[string](`JSON.stringify([...document.querySelectorAll('[data-meter]')].map(e => ({
		meter: e.dataset.meter,
		used: e.querySelector('[data-used]')?.dataset.used ?? '',
		limit: e.querySelector('[data-limit]')?.dataset.limit ?? ''})))`))
	if err := json.Unmarshal([]byte(raw), &ms); err != nil {
		t.Fatal(err)
	}
	out := map[string]pageMeter{}
	for _, m := range ms {
		out[m.Meter] = m
	}
	return out
}

// backdate moves the tenant's period anchor days back, so that its current
// period has history to show.
func (b *bundle) backdate(t testing.TB, tenantID string, days int) {
	t.Helper()
	if _, err := b.Pool.Exec(b.Ctx, `UPDATE tenants SET period_anchor = now() - make_interval(days => $2) WHERE id = $1`, tenantID, days); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ents.BumpAndPublish(b.Ctx, tenantID, "test: period anchor moved back"); err != nil {
		t.Fatal(err)
	}
}

// seedUsage gives the tenant hours of hourly history of two meters in its
// current period (the durable meters hold the same totals), refusals per
// day, and a few usage events. It returns the durable totals before the
// events.
func (b *bundle) seedUsage(t testing.TB, tenantID string, hours int) (requests, exports int64) {
	t.Helper()
	snap, err := b.Ents.SnapshotFromPostgres(b.Ctx, tenantID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(b.Ctx, `
		INSERT INTO usage_hourly (tenant_id, period_start, meter, hour, used)
		SELECT $1, $3, m, h, CASE WHEN m = 'requests' THEN (150 + 60 * sin(extract(epoch FROM h) / 20000))::bigint
		                      WHEN extract(hour FROM h) IN (9, 15) THEN 1 ELSE 0 END
		FROM generate_series(date_trunc('hour', now()) - make_interval(hours => $2 - 1), date_trunc('hour', now()) - interval '1 hour', interval '1 hour') h,
		     unnest(ARRAY['requests', 'exports']) m
		WHERE h >= $3
		ON CONFLICT DO NOTHING`, tenantID, hours, snap.PeriodStart); err != nil {
		t.Fatal(err)
	}
	if err := b.Pool.QueryRow(b.Ctx, `
		WITH s AS (SELECT meter, sum(used)::bigint AS n FROM usage_hourly WHERE tenant_id = $1 AND period_start = $2 GROUP BY meter),
		ins AS (INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used)
		        SELECT $1, meter, $2, $3, n FROM s ON CONFLICT (tenant_id, meter, period_start) DO UPDATE SET used = EXCLUDED.used)
		SELECT COALESCE((SELECT n FROM s WHERE meter = 'requests'), 0), COALESCE((SELECT n FROM s WHERE meter = 'exports'), 0)`,
		tenantID, snap.PeriodStart, snap.PeriodEnd).Scan(&requests, &exports); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(b.Ctx, `
		INSERT INTO refusals_daily (tenant_id, day, policy, refused)
		SELECT $1, d::date, p, (CASE WHEN p = 'rate' THEN 4 ELSE 0 END + (extract(day FROM d)::int * 7) % 23)::bigint
		FROM generate_series(now() - interval '28 days', now(), interval '1 day') d, unnest(ARRAY['rate', 'requests']) p
		WHERE d >= $2
		ON CONFLICT DO NOTHING`, tenantID, snap.PeriodStart); err != nil {
		t.Fatal(err)
	}
	evs := []metering.Event{}
	for i := 0; i < 3; i++ {
		evs = append(evs, metering.Event{ID: uniq("evt"), Meter: "exports", Quantity: 7, Timestamp: time.Now()})
	}
	if _, err := b.Meter.Ingest(b.Ctx, tenantID, evs); err != nil {
		t.Fatal(err)
	}
	return requests, exports
}

func TestBrowser(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	team := uniq("team")
	b.Plan(t, catalogue.PlanInput{Key: team, Name: "Team",
		Rate:   &catalogue.RateInput{PerSecond: ptr(100.0), Burst: ptr[int64](1000)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000000)}, "exports": {Limit: ptr[int64](500), Mode: "soft"}}})
	b.ownPlansOnly(t, b.Free, b.Pro, team)
	acme := b.Tenant(t, "Acme Analytics", b.Pro)
	other := b.Tenant(t, "Globex", b.Free)
	acmeKey, otherKey := b.Key(t, acme.ID), b.Key(t, other.ID)
	b.backdate(t, acme.ID, 20)
	seededRequests, seededExports := b.seedUsage(t, acme.ID, 24*30)
	// Some requests through the API, counted by the limiter in Redis.
	for i := 0; i < 5; i++ {
		req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/check", strings.NewReader(`{"cost": 3}`))
		req.Header.Set("Authorization", "Bearer "+acmeKey.Key)
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("check: %d", r.StatusCode)
		}
	}
	if n := b.Fallbacks.Load(); n != 0 {
		// Allowed by the fail mode, so not counted: the usage below would
		// be short by their cost.
		t.Fatalf("%d limiter decisions of the checks went to the fail mode (Redis slower than the timeout)", n)
	}
	base := b.srv.URL

	tenant := user(t, chrome)
	var link string
	t.Run("dashboard link logs in", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, base+"/admin/v1/tenants/"+acme.ID+"/dashboard-links", nil)
		req.Header.Set("Authorization", "Bearer "+b.Admin)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ URL string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		r.Body.Close()
		link = body.URL
		if st := step(t, tenant, "open link", chromedp.Navigate(base+link)); st != http.StatusOK {
			t.Fatalf("link page: %d", st)
		}
		if st := step(t, tenant, "continue", chromedp.Click(chromedp.CSS("#continue"))); st != http.StatusOK {
			t.Fatalf("after continue: %d", st)
		}
		if loc := location(t, tenant); loc != base+"/dashboard" {
			t.Fatalf("at %s, want the dashboard", loc)
		}
		if h := text(t, tenant, "h1"); h != "Acme Analytics" {
			t.Fatalf("h1 = %q", h)
		}
	})

	t.Run("a used link is refused", func(t *testing.T) {
		u := user(t, chrome)
		if st := step(t, u, "open used link", chromedp.Navigate(base+link)); st != http.StatusGone {
			t.Fatalf("used link: %d, want 410", st)
		}
		if !strings.Contains(text(t, u, "#link-error"), "already used") {
			t.Fatal("no explanation for the used link")
		}
		if st := step(t, u, "dashboard", chromedp.Navigate(base+"/dashboard")); st != http.StatusOK || location(t, u) != base+"/dashboard/login" {
			t.Fatalf("without a session the dashboard must send to login, at %s", location(t, u))
		}
	})

	keyUser := user(t, chrome)
	t.Run("API key login", func(t *testing.T) {
		step(t, keyUser, "login page", chromedp.Navigate(base+"/dashboard/login"))
		do(t, keyUser, "type key", chromedp.SendKeys(chromedp.CSS("#api_key"), acmeKey.Key))
		// Submitted from the keyboard: Enter in the field.
		if st := step(t, keyUser, "submit", chromedp.SendKeys(chromedp.CSS("#api_key"), "\r")); st != http.StatusOK {
			t.Fatalf("after login: %d", st)
		}
		if loc := location(t, keyUser); loc != base+"/dashboard" {
			t.Fatalf("at %s", loc)
		}
	})

	t.Run("dashboard shows the usage the API reports", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/usage", nil)
		req.Header.Set("Authorization", "Bearer "+acmeKey.Key)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var api metering.Usage
		_ = json.NewDecoder(r.Body).Decode(&api)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || len(api.Meters) < 2 {
			t.Fatalf("GET /v1/usage: %d %+v", r.StatusCode, api)
		}
		step(t, keyUser, "reload", chromedp.Navigate(base+"/dashboard"))
		got := pageMeters(t, keyUser)
		for _, m := range api.Meters {
			pm, ok := got[m.Meter]
			if !ok {
				t.Fatalf("meter %s of the API is not on the page (page: %+v)", m.Meter, got)
			}
			if pm.Used != itoa(m.Used) || (m.Limit != nil && pm.Limit != itoa(*m.Limit)) {
				t.Fatalf("meter %s: page used %s limit %s, API used %d limit %v", m.Meter, pm.Used, pm.Limit, m.Used, *m.Limit)
			}
		}
		if got["requests"].Used != itoa(seededRequests+15) || got["exports"].Used != itoa(seededExports+21) {
			t.Fatalf("page meters %+v, want requests %d (+5 checks of cost 3) and exports %d (+21)", got, seededRequests, seededExports)
		}
		screenshot(t, keyUser, "dashboard-1280", 1280)
		screenshot(t, keyUser, "dashboard-375", 375)
	})

	admin := user(t, chrome)
	t.Run("console refuses without login", func(t *testing.T) {
		step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+acme.ID))
		if loc := location(t, admin); loc != base+"/admin/login" {
			t.Fatalf("at %s, want the login page", loc)
		}
		do(t, admin, "type wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"))
		if st := step(t, admin, "submit", chromedp.Submit(chromedp.CSS("#token"))); st != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d", st)
		}
	})

	t.Run("admin changes the plan and the dashboard shows it", func(t *testing.T) {
		do(t, admin, "type token", chromedp.SetValue(chromedp.CSS("#token"), b.Admin))
		step(t, admin, "login", chromedp.Submit(chromedp.CSS("#token")))
		if loc := location(t, admin); loc != base+"/admin/tenants" {
			t.Fatalf("at %s after login", loc)
		}
		step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+acme.ID))
		do(t, admin, "choose plan", chromedp.SetValue(chromedp.CSS("#plan-select"), team))
		if st := step(t, admin, "change", chromedp.Click(chromedp.CSS("#change-plan"))); st != http.StatusOK {
			t.Fatalf("plan change: %d", st)
		}
		if st := step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button"))); st != http.StatusOK {
			t.Fatalf("plan change confirmed: %d", st)
		}
		if p := run(t, admin, "plan", chromedp.AttributeValue(chromedp.CSS("#plan"), "data-plan")); p.Value != team {
			t.Fatalf("console shows plan %q, want %q", p.Value, team)
		}
		screenshot(t, admin, "admin-tenant-1280", 1280)
		screenshot(t, admin, "admin-tenant-375", 375)

		step(t, keyUser, "dashboard", chromedp.Navigate(base+"/dashboard"))
		if p := run(t, keyUser, "plan", chromedp.AttributeValue(chromedp.CSS("#plan"), "data-plan")); p.Value != team {
			t.Fatalf("dashboard shows plan %q, want %q", p.Value, team)
		}
		if got := pageMeters(t, keyUser); got["exports"].Limit != "500" {
			t.Fatalf("dashboard exports limit %q, want the new plan's 500", got["exports"].Limit)
		}
	})

	t.Run("a form without its CSRF token is refused", func(t *testing.T) {
		step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+acme.ID))
		do(t, admin, "drop token", chromedp.Evaluate[chromedp.Void](`document.querySelector('#change-plan').form.querySelector('[name=csrf]').remove()`))
		do(t, admin, "choose plan", chromedp.SetValue(chromedp.CSS("#plan-select"), b.Free))
		if st := step(t, admin, "submit", chromedp.Click(chromedp.CSS("#change-plan"))); st != http.StatusForbidden {
			t.Fatalf("without csrf: %d, want 403", st)
		}
		if d, _ := b.Ents.GetTenant(b.Ctx, acme.ID); d.Plan != team {
			t.Fatalf("plan changed to %s by a form without csrf", d.Plan)
		}
	})

	t.Run("a tenant session is refused on another tenant's data", func(t *testing.T) {
		// The console's page of the other tenant: the tenant session is no
		// console session.
		step(t, keyUser, "other tenant", chromedp.Navigate(base+"/admin/tenants/"+other.ID))
		if loc := location(t, keyUser); loc != base+"/admin/login" {
			t.Fatalf("tenant session reached %s", loc)
		}
		// A revoke form pointed at the other tenant's key: 404, key intact.
		step(t, keyUser, "dashboard", chromedp.Navigate(base+"/dashboard"))
		do(t, keyUser, "retarget", chromedp.Evaluate[chromedp.Void](`(() => { const f = document.querySelector('form[action$="/revoke"]'); f.action = '/dashboard/keys/`+otherKey.ID+`/revoke'; })()`))
		if st := step(t, keyUser, "submit", chromedp.Click(chromedp.CSS(`form[action$="/revoke"] button`))); st != http.StatusNotFound {
			t.Fatalf("revoking another tenant's key: %d, want 404", st)
		}
		if _, err := b.Keys.Authenticate(b.Ctx, otherKey.Key); err != nil {
			t.Fatalf("the other tenant's key was revoked: %v", err)
		}
	})
}

// consoleTab is a new user's tab logged into the console with token.
func (b *bundle) consoleTab(t *testing.T, chrome context.Context, token string) context.Context {
	t.Helper()
	admin := user(t, chrome)
	step(t, admin, "login page", chromedp.Navigate(b.srv.URL+"/admin/login"))
	do(t, admin, "type token", chromedp.SetValue(chromedp.CSS("#token"), token))
	step(t, admin, "login", chromedp.Submit(chromedp.CSS("#token")))
	return admin
}
