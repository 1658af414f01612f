package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// The console's plan form sets how quotas reset, and keeps what it does not
// show (a quota's Stripe meter and what it is sent).
func TestConsolePlanQuotaWindow(t *testing.T) {
	b := setup(t)
	br, tok := b.adminBrowser(t)
	key := uniq("annual")
	limit := int64(10)
	if _, err := b.ents.CreatePlan(b.ctx, entitlements.PlanInput{Key: key, Quotas: map[string]*entitlements.QuotaInput{
		"tokens": {Limit: &limit, Mode: "soft", StripeMeterEvent: "tokens", StripeReport: entitlements.ReportTotal}}}); err != nil {
		t.Fatal(err)
	}
	page := br.get("/admin/plans/" + key)
	wantStatus(t, page, http.StatusOK, "plan page")
	if !strings.Contains(page.body, `<option value="month" selected>`) {
		t.Fatal("a new plan's form must show quotas resetting monthly")
	}
	edit := url.Values{"csrf": {tok}, "name": {"Annual"}, "quotas": {"tokens 20 soft"}, "quota_window": {"billing_period"}}
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "edit plan")
	p, err := b.ents.GetPlan(b.ctx, key)
	if err != nil || p.QuotaWindow != "billing_period" || p.Quotas["tokens"].StripeReport != entitlements.ReportTotal || p.Quotas["tokens"].StripeMeterEvent != "tokens" {
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
