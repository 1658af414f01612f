package browser_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// chartDay reads one day's total of a chart from the page ("" when the day
// has no row).
func chartDay(t *testing.T, ctx context.Context, label, day string) string {
	t.Helper()
	return run(t, ctx, "chart "+label, chromedp.Evaluate[string](`(() => {
		const f = [...document.querySelectorAll('[data-chart]')].find(e => e.dataset.chart === `+jsString(label)+`);
		const r = f && f.querySelector('tr[data-day="`+day+`"]');
		return r ? r.dataset.total : '';
	})()`))
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestBrowserFigures puts known figures in (usage in the period's first,
// partial hour, and the previous period's in the same clock hour; an
// override; 18 refusals of which 17 come from the limiter's refusal cache)
// and reads them on every page that shows them and in the CSV the
// dashboard's link downloads.
func TestBrowserFigures(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	tiny := uniq("tiny")
	b.Plan(t, catalogue.PlanInput{Key: tiny, Name: "Tiny",
		// Three requests, then one every 100 s: the refusal stays cached.
		Rate:   &catalogue.RateInput{PerSecond: ptr(0.01), Burst: ptr[int64](3)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100000)}, "exports": {Limit: ptr[int64](50), Mode: "soft"}}})
	acme := b.Tenant(t, "Acme First Hour", tiny)
	key := b.Key(t, acme.ID)
	// The period starts at :37 of the previous hour or earlier: its first
	// hour is partial.
	if _, err := b.Pool.Exec(b.Ctx, `UPDATE tenants SET period_anchor = date_trunc('hour', now() - interval '1 hour') + interval '37 minutes' WHERE id = $1`, acme.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ents.BumpAndPublish(b.Ctx, acme.ID, "test: period starts at :37"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ents.CreateOverride(b.Ctx, acme.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](5000), Reason: "launch week"}); err != nil {
		t.Fatal(err)
	}
	snap, err := b.Ents.SnapshotFromPostgres(b.Ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.PeriodStart.Minute() != 37 {
		t.Fatalf("period starts %v", snap.PeriodStart)
	}
	at := snap.PeriodStart.Add(time.Minute)
	// At :17 of the same clock hour the previous period was still running:
	// its usage there is no part of this period's figures or charts.
	before := snap.PeriodStart.Add(-20 * time.Minute)
	if _, err := b.Meter.Ingest(b.Ctx, acme.ID, []metering.Event{
		{ID: uniq("evt"), Meter: "requests", Quantity: 332, Timestamp: at},
		{ID: uniq("evt"), Meter: "exports", Quantity: 72, Timestamp: at},
		{ID: uniq("evt"), Meter: "requests", Quantity: 7000, Timestamp: before},
		{ID: uniq("evt"), Meter: "exports", Quantity: 900, Timestamp: before},
	}); err != nil {
		t.Fatal(err)
	}
	// GET /v1/usage before the checks: it passes the rate limit too (one
	// token of the burst of 3).
	var usage metering.Usage
	if st := apiJSON(t, http.MethodGet, b.srv.URL+"/v1/usage", key.Key, "", &usage); st != http.StatusOK {
		t.Fatalf("usage: %d", st)
	}
	for _, m := range usage.Meters {
		if m.Meter == "requests" && (m.Used != 332 || m.Limit == nil || *m.Limit != 105000) {
			t.Fatalf("/v1/usage requests: used %d limit %v, want 332 of 105000", m.Used, m.Limit)
		}
	}
	// 20 checks: 2 allowed, 18 refused, 17 of them from the refusal cache.
	refused := 0
	for i := 0; i < 20; i++ {
		if st := apiJSON(t, http.MethodPost, b.srv.URL+"/v1/check", key.Key, `{}`, nil); st == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused != 18 || b.CachedRefusals.Load() != 17 {
		t.Fatalf("refused %d (want 18), %d from the cache (want 17)", refused, b.CachedRefusals.Load())
	}
	// After them, the function behind GET /v1/usage and the admin API.
	want := map[string][2]string{"requests": {"334", "105000"}, "exports": {"72", "50"}}
	u, err := b.Meter.Usage(b.Ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range u.Meters {
		if w, ok := want[m.Meter]; ok && (itoa(m.Used) != w[0] || m.Limit == nil || itoa(*m.Limit) != w[1]) {
			t.Fatalf("usage %s: used %d limit %v, want %v", m.Meter, m.Used, m.Limit, w)
		}
	}
	var detail struct {
		Usage []struct {
			Meter string
			Used  int64
			Limit *int64
		}
	}
	if st := apiJSON(t, http.MethodGet, b.srv.URL+"/admin/v1/tenants/"+acme.ID, b.Admin, "", &detail); st != http.StatusOK {
		t.Fatalf("admin tenant: %d", st)
	}
	for _, m := range detail.Usage {
		if w, ok := want[m.Meter]; ok && (itoa(m.Used) != w[0] || m.Limit == nil || itoa(*m.Limit) != w[1]) {
			t.Fatalf("GET /admin/v1/tenants/{id} %s: used %d limit %v, want %v", m.Meter, m.Used, m.Limit, w)
		}
	}
	base := b.srv.URL
	firstDay := snap.PeriodStart.UTC().Format(time.DateOnly)
	today := time.Now().UTC().Format(time.DateOnly)

	tenant := user(t, chrome)
	step(t, tenant, "open link", chromedp.Navigate(base+b.mint(t, acme.ID)))
	step(t, tenant, "continue", chromedp.Click(chromedp.CSS("#continue")))
	checkPage := func(t *testing.T, ctx context.Context, where string) {
		got := pageMeters(t, ctx)
		for m, w := range want {
			if got[m].Used != w[0] || got[m].Limit != w[1] {
				t.Fatalf("%s: %s shows %s / %s, want %s / %s", where, m, got[m].Used, got[m].Limit, w[0], w[1])
			}
		}
		if got := chartDay(t, ctx, "requests per day", firstDay); got != "332" {
			t.Fatalf("%s: requests chart on %s shows %q, want 332 (the first, partial hour)", where, firstDay, got)
		}
		if got := chartDay(t, ctx, "exports per day", firstDay); got != "72" {
			t.Fatalf("%s: exports chart on %s shows %q, want 72", where, firstDay, got)
		}
	}
	// The cached refusals reach Redis within about a second.
	refusalsShown := func(t *testing.T, ctx context.Context, url string) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			step(t, ctx, "load", chromedp.Navigate(url))
			got := chartDay(t, ctx, "refused requests per day", today)
			if got == "18" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: refusals today %q, want 18", url, got)
			}
			time.Sleep(200 * time.Millisecond) // the limiter flushes every second
		}
	}
	t.Run("dashboard", func(t *testing.T) {
		refusalsShown(t, tenant, base+"/dashboard")
		checkPage(t, tenant, "dashboard")
	})
	t.Run("dashboard CSV link", func(t *testing.T) {
		name, body := download(t, tenant, `a[href="/dashboard/usage.csv"]`)
		if want := "usage-" + firstDay + ".csv"; name != want {
			t.Fatalf("the download is named %q, want %q", name, want)
		}
		got, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatalf("parse csv: %v\n%s", err, body)
		}
		want := [][]string{{"day", "meter", "quantity"}, {firstDay, "exports", "72"}, {firstDay, "requests", "332"}}
		if !slices.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Fatalf("the CSV the link downloads:\n%v\nwant\n%v", got, want)
		}
	})
	admin := b.consoleTab(t, chrome, b.Admin)
	t.Run("console tenant page", func(t *testing.T) {
		refusalsShown(t, admin, base+"/admin/tenants/"+acme.ID)
		checkPage(t, admin, "console")
	})
	t.Run("console tenant list", func(t *testing.T) {
		step(t, admin, "list", chromedp.Navigate(base+"/admin/tenants?q="+acme.ID))
		used := run(t, admin, "used", chromedp.Evaluate[string](`document.querySelector('tr[data-tenant="`+acme.ID+`"] [data-used]').dataset.used + ' / ' + document.querySelector('tr[data-tenant="`+acme.ID+`"] [data-used]').dataset.limit`))
		if used != "334 / 105000" {
			t.Fatalf("list shows %q, want 334 / 105000", used)
		}
	})
}
