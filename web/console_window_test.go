package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/period"
)

// The console's plan form sets how quotas reset, and keeps what it does not
// show (a quota's Stripe meter and what it is sent).
func TestConsolePlanQuotaWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, tok := b.adminBrowser(t)
	key := uniq("annual")
	limit := int64(10)
	if _, err := b.cat.CreatePlan(b.ctx, catalogue.PlanInput{Key: key, Quotas: map[string]*catalogue.QuotaInput{
		"tokens": {Limit: &limit, Mode: "soft", StripeMeterEvent: "tokens", StripeReport: catalogue.ReportTotal}}}); err != nil {
		t.Fatal(err)
	}
	page := br.get("/admin/plans/" + key)
	wantStatus(t, page, http.StatusOK, "plan page")
	if !strings.Contains(page.body, `<option value="month" selected>`) {
		t.Fatal("a new plan's form must show quotas resetting monthly")
	}
	edit := quotaRows(url.Values{"csrf": {tok}, "name": {"Annual"}, "quota_window": {"billing_period"}, "confirm": {"1"}}, "tokens 20 soft")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "edit plan")
	p, err := b.cat.GetPlan(b.ctx, key)
	if err != nil || p.QuotaWindow != "billing_period" || p.Quotas["tokens"].StripeReport != catalogue.ReportTotal || p.Quotas["tokens"].StripeMeterEvent != "tokens" {
		t.Fatalf("edited plan %+v, %v", p, err)
	}
	if page := br.get("/admin/plans/" + key); !strings.Contains(page.body, `<option value="billing_period" selected>`) {
		t.Fatal("the form must show the stored quota window")
	}
	edit.Set("quota_window", "fortnight")
	r := br.post("/admin/plans/"+key, edit)
	wantStatus(t, r, http.StatusBadRequest, "bad quota window")
	if !strings.Contains(r.body, "quota_window") {
		t.Fatal("the refused form must name quota_window")
	}
}

// A tenant on a yearly subscription sees this month's window on the
// dashboard and in GET /v1/usage, not the billing year.
func TestDashboardShowsMonthOfYearlySubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Annual Co", b.pro)
	// A year that started 45 days ago: the current month is the second.
	start := time.Now().UTC().Add(-45 * 24 * time.Hour).Truncate(time.Second)
	if _, err := b.pool.Exec(b.ctx, `
		INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end)
		VALUES ($1, $2, $3, 'active', $4, $5)`, uniq("sub"), tn.ID, uniq("cus"), start, start.AddDate(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ents.BumpAndPublish(b.ctx, tn.ID, "test: yearly subscription"); err != nil {
		t.Fatal(err)
	}
	mStart, mEnd := start.AddDate(0, 1, 0), start.AddDate(0, 2, 0)
	if mStart.Day() != start.Day() || mEnd.Day() != start.Day() {
		// A clamped month (the 29th-31st): internal/period's tests pin
		// the clamping; here the window comes from it.
		mStart, mEnd = period.Current(time.Time{}, &period.Period{Start: start, End: start.AddDate(1, 0, 0)}, time.Now()).Start,
			period.Current(time.Time{}, &period.Period{Start: start, End: start.AddDate(1, 0, 0)}, time.Now()).End
	}
	key := b.key(t, tn.ID)
	r := reqWith(b.browser(t), http.MethodGet, "/v1/usage", key.Key)
	var u struct {
		Period struct{ Start, End time.Time } `json:"period"`
	}
	if err := json.Unmarshal([]byte(r.body), &u); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /v1/usage: %d %s", r.status, r.body)
	}
	if !u.Period.Start.Equal(mStart) || !u.Period.End.Equal(mEnd) {
		t.Fatalf("usage period [%s, %s), want the month [%s, %s) of the year from %s", u.Period.Start, u.Period.End, mStart, mEnd, start)
	}
	br := b.browser(t)
	br.loginKey(key.Key)
	dash := br.get("/dashboard")
	wantStatus(t, dash, http.StatusOK, "dashboard")
	want := mStart.Format("2 Jan 2006") + " – " + mEnd.Format("2 Jan 2006")
	if !strings.Contains(dash.body, want) {
		t.Fatalf("dashboard does not show the month %q", want)
	}
}
