package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// Editing a plan reaches every tenant on it: the save first shows the
// limits before and after and the tenants affected (linked); only the
// confirm form saves, and only it is audited.
func TestConsolePlanEditIsConfirmedWithItsEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uniq("edit")
	b.plan(t, catalogue.PlanInput{Key: key, Name: "Edit", Rate: &catalogue.RateInput{PerSecond: ptr(10.0), Burst: ptr[int64](20)},
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}, "exports": {Limit: ptr[int64](5), Mode: "soft"}}})
	one, two := b.tenant(t, "First On Plan", key), b.tenant(t, "Second On Plan", key)
	b.tenant(t, "Not On Plan", b.free)
	br, tok := b.adminBrowser(t)

	form := quotaRows(url.Values{"csrf": {tok}, "name": {"Edit"}, "rate_per_second": {"10"}, "rate_burst": {"20"}, "concurrency": {"4"}},
		"requests 2000 hard", "exports 5 soft", "tokens 7 soft")
	form.Set("quotas[1].remove", "1") // exports goes
	r := br.post("/admin/plans/"+key, form)
	wantStatus(t, r, http.StatusOK, "plan edit without confirmation")
	wantIn(t, r.body, "Saving changes the limits of 2 tenants at once.",
		`data-limit="Rate" data-before="10/s, burst 20" data-after="10/s, burst 20"`,
		`data-limit="Concurrency" data-before="unlimited" data-after="4"`,
		`data-limit="Quota requests" data-before="1,000 hard" data-after="2,000 hard"`,
		`data-limit="Quota exports" data-before="5 soft" data-after="unlimited"`,
		`data-limit="Quota tokens" data-before="unlimited" data-after="7 soft"`,
		`href="/admin/tenants/`+one.ID+`">First On Plan</a>`, `href="/admin/tenants/`+two.ID+`">Second On Plan</a>`,
		`name="quotas[2].meter" value="tokens"`, `name="quotas[1].remove" value="1"`)
	if strings.Contains(r.body, "Not On Plan") {
		t.Fatal("a tenant on another plan is listed")
	}
	if p, _ := b.cat.GetPlan(b.ctx, key); p.Quotas["requests"].Limit != 1000 || p.Concurrency != nil {
		t.Fatalf("the plan was saved without confirmation: %+v", p)
	}
	if es, _ := b.trail.List(b.ctx, audit.Filter{PlanKey: key}); len(es) != 0 {
		t.Fatalf("the confirmation was audited: %+v", es)
	}

	// The confirm form posts the same fields back: the plan is saved.
	form.Set("confirm", "1")
	wantRedirect(t, br.post("/admin/plans/"+key, form), "/admin/plans/"+key+"?done=edited", "confirmed")
	p, _ := b.cat.GetPlan(b.ctx, key)
	if _, ok := p.Quotas["exports"]; ok || p.Quotas["requests"].Limit != 2000 || p.Quotas["tokens"].Mode != "soft" || p.Concurrency == nil || *p.Concurrency != 4 {
		t.Fatalf("saved plan %+v", p)
	}
	if snap, _ := b.ents.SnapshotFromPostgres(b.ctx, one.ID); snap.Quotas["requests"].Limit != 2000 {
		t.Fatalf("a tenant on the plan has %+v", snap.Quotas)
	}
	if es, _ := b.trail.List(b.ctx, audit.Filter{PlanKey: key}); len(es) != 1 || es[0].Action != "plan.edit" {
		t.Fatalf("audit %+v", es)
	}

	// Bad rows come back with the form, the error next to the row.
	bad := quotaRows(url.Values{"csrf": {tok}, "name": {"Edit"}}, "requests 10 hard", "Exports! 5 soft", "tokens -3 soft")
	r = br.post("/admin/plans/"+key, bad)
	wantStatus(t, r, http.StatusBadRequest, "bad rows")
	wantIn(t, r.body, "<strong>quotas[1].meter</strong>", "<strong>quotas[2].limit</strong>", `data-row-error="1"`, `data-row-error="2"`,
		`name="quotas[1].meter" value="Exports!"`)
	if strings.Contains(r.body, `id="confirm-button"`) {
		t.Fatal("a bad form must not reach the confirmation")
	}
	// What only the service checks (here, per second beyond its bound) is
	// refused before the confirmation too, naming the field.
	huge := quotaRows(url.Values{"csrf": {tok}, "rate_per_second": {"1e12"}}, "requests 10 hard")
	r = br.post("/admin/plans/"+key, huge)
	wantStatus(t, r, http.StatusBadRequest, "rate out of bounds")
	wantIn(t, r.body, "<strong>rate.per_second</strong>")
}

// The quota editor works without JavaScript: "More quota rows" adds empty
// rows and saves nothing; a ticked row is removed.
func TestConsoleQuotaEditorRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, tok := b.adminBrowser(t)
	page := br.get("/admin/plans")
	wantIn(t, page.body, `name="quotas[0].meter" value=""`, `name="quotas[2].meter" value=""`, `name="quota_rows" value="3"`)

	key := uniq("rows")
	form := quotaRows(url.Values{"csrf": {tok}, "key": {key}, "more": {"1"}}, "requests 100 hard", "exports 3 soft")
	r := br.post("/admin/plans", form)
	wantStatus(t, r, http.StatusOK, "more rows")
	wantIn(t, r.body, `name="quota_rows" value="5"`, `name="quotas[1].meter" value="exports"`, `name="quotas[4].meter" value=""`)
	if _, err := b.cat.GetPlan(b.ctx, key); err == nil {
		t.Fatal("More rows saved the plan")
	}
	form.Del("more")
	form.Set("quotas[4].meter", "tokens")
	form.Set("quotas[4].limit", "9")
	form.Set("quotas[4].mode", "soft")
	form.Set("quota_rows", "5")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+key+"?done=created", "create with a row added")
	p, err := b.cat.GetPlan(b.ctx, key)
	if err != nil || len(p.Quotas) != 3 || p.Quotas["tokens"].Limit != 9 {
		t.Fatalf("created %+v %v", p.Quotas, err)
	}
	if es, _ := b.trail.List(b.ctx, audit.Filter{PlanKey: key}); len(es) != 1 || es[0].Action != "plan.create" {
		t.Fatalf("audit %+v: More rows must not be recorded", es)
	}
	page = br.get("/admin/plans/" + key)
	wantIn(t, page.body, `name="quotas[2].meter" value="tokens"`, `name="quota_rows" value="5"`)
	r = br.post("/admin/plans/"+key, url.Values{"csrf": {tok}, "more": {"1"}, "quota_rows": {"1"}, "quotas[0].meter": {"requests"}, "quotas[0].limit": {"5"}, "quotas[0].mode": {"hard"}})
	wantStatus(t, r, http.StatusOK, "more rows on the edit page")
	wantIn(t, r.body, `name="quota_rows" value="4"`)
	if p, _ := b.cat.GetPlan(b.ctx, key); p.Quotas["requests"].Limit != 100 {
		t.Fatal("More rows saved the edit")
	}
}
