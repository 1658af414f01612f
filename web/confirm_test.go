package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// actions lists the audit trail's actions of the tenant, newest first.
func (b *bundle) actions(t testing.TB, tenantID string) []string {
	t.Helper()
	es, err := b.trail.List(b.ctx, audit.Filter{TenantID: tenantID})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Action)
	}
	return out
}

func wantIn(t testing.TB, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Fatalf("page lacks %q:\n%.4000s", w, body)
		}
	}
}

// A plan change first shows the limits now and on the new plan, with the
// meters whose usage already reaches a new hard limit; only the confirm
// form's POST changes the plan, and only it is audited.
func TestConsolePlanChangeIsConfirmedWithItsEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tiny := uniq("tiny")
	b.plan(t, catalogue.PlanInput{Key: tiny, Concurrency: ptr[int64](3),
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](40)}, "exports": {Limit: ptr[int64](5), Mode: "soft"}}})
	tn := b.tenant(t, "Confirm Co", b.free)
	b.Use(t, tn.ID, "requests", 50)
	br, tok := b.adminBrowser(t)
	path := "/admin/tenants/" + tn.ID + "/plan"

	r := br.post(path, url.Values{"csrf": {tok}, "plan": {tiny}})
	wantStatus(t, r, http.StatusOK, "plan change without confirmation")
	wantIn(t, r.body, `id="confirm-button"`, `name="confirm" value="1"`, `name="plan" value="`+tiny+`"`,
		`data-limit="Plan" data-before="`+b.free+`" data-after="`+tiny+`"`,
		`data-limit="Rate" data-before="100/s, burst 100" data-after="unlimited"`,
		`data-limit="Concurrency" data-before="unlimited" data-after="3"`,
		`data-limit="Quota requests" data-before="1,000 hard" data-after="40 hard" data-over="1"`,
		`data-limit="Quota exports" data-before="unlimited" data-after="5 soft"`,
		`id="confirm-warning"`)
	if d, _ := b.ents.GetTenant(b.ctx, tn.ID); d.Plan != b.free {
		t.Fatalf("the plan changed without confirmation: %s", d.Plan)
	}
	if a := b.actions(t, tn.ID); len(a) != 0 {
		t.Fatalf("a confirmation page was audited: %v", a)
	}
	// Under the new hard limit: no warning.
	r = br.post(path, url.Values{"csrf": {tok}, "plan": {b.pro}})
	wantIn(t, r.body, `data-limit="Quota requests" data-before="1,000 hard" data-after="100,000 hard"`)
	if strings.Contains(r.body, `data-over="1"`) || strings.Contains(r.body, `id="confirm-warning"`) {
		t.Fatal("usage 50 is not over 100,000")
	}

	// Bad input: a 4xx naming the field, nothing changed.
	r = br.post(path, url.Values{"csrf": {tok}, "plan": {"no-such-plan"}})
	wantStatus(t, r, http.StatusBadRequest, "unknown plan")
	wantIn(t, r.body, "<strong>plan</strong>")
	wantStatus(t, br.post(path, url.Values{"csrf": {tok}}), http.StatusBadRequest, "no plan")
	wantStatus(t, br.post(path, url.Values{"plan": {tiny}, "confirm": {"1"}}), http.StatusForbidden, "confirm without csrf")
	wantStatus(t, br.post(path, url.Values{"csrf": {tok}, "plan": {tiny}, "confirm": {"yes"}}), http.StatusOK, "a confirm field that is not 1 only asks again")

	wantRedirect(t, br.post(path, url.Values{"csrf": {tok}, "plan": {tiny}, "confirm": {"1"}}), "/admin/tenants/"+tn.ID+"?done=plan", "confirmed")
	if d, _ := b.ents.GetTenant(b.ctx, tn.ID); d.Plan != tiny {
		t.Fatalf("plan %s after confirmation", d.Plan)
	}
	if a := b.actions(t, tn.ID); strings.Join(a, ",") != "tenant.plan_change" {
		t.Fatalf("audited %v, want one plan change", a)
	}
}

// Revoking a key first shows the key, its last use and the dashboard
// sessions it ends.
func TestConsoleRevokeIsConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Keys Co", b.free)
	k := b.key(t, tn.ID)
	dash := b.browser(t)
	wantRedirect(t, dash.loginKey(k.Key), "/dashboard", "tenant logs in with the key")
	if _, err := b.pool.Exec(b.ctx, `UPDATE api_keys SET last_used_at = '2026-11-30T10:00:00Z' WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	br, tok := b.adminBrowser(t)
	path := "/admin/tenants/" + tn.ID + "/keys/" + k.ID + "/revoke"

	r := br.post(path, url.Values{"csrf": {tok}})
	wantStatus(t, r, http.StatusOK, "revoke without confirmation")
	wantIn(t, r.body, `data-fact="Key">`+k.Prefix+`…`, `data-fact="Last used">30 Nov 2026 10:00`, `data-fact="Dashboard sessions it ends">1<`)
	if _, err := b.keys.Authenticate(b.ctx, k.Key); err != nil {
		t.Fatalf("the key was revoked without confirmation: %v", err)
	}
	wantStatus(t, dash.get("/dashboard"), http.StatusOK, "the session still works")

	wantRedirect(t, br.post(path, url.Values{"csrf": {tok}, "confirm": {"1"}}), "/admin/tenants/"+tn.ID+"?done=revoked#keys", "confirmed")
	if _, err := b.keys.Authenticate(b.ctx, k.Key); err == nil {
		t.Fatal("the key still works after the confirmed revocation")
	}
	wantRedirect(t, dash.get("/dashboard"), "/dashboard/login", "the session ended with its key")
	if a := b.actions(t, tn.ID); strings.Join(a, ",") != "api_key.revoke" {
		t.Fatalf("audited %v", a)
	}
	// Another tenant's key under this tenant: 404, asked or confirmed.
	other := b.tenant(t, "Other Keys", b.free)
	ok := b.key(t, other.ID)
	for _, f := range []url.Values{{"csrf": {tok}}, {"csrf": {tok}, "confirm": {"1"}}} {
		wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/keys/"+ok.ID+"/revoke", f), http.StatusNotFound, "another tenant's key")
	}
	wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/keys/nope/revoke", url.Values{"csrf": {tok}}), http.StatusNotFound, "malformed key id")
}

// Removing an override first shows the meter's limit with and without it.
func TestConsoleOverrideRemovalIsConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Override Co", b.pro)
	ov, err := b.ents.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](500), Reason: "launch"})
	if err != nil {
		t.Fatal(err)
	}
	b.Use(t, tn.ID, "requests", 100200)
	br, tok := b.adminBrowser(t)
	path := "/admin/tenants/" + tn.ID + "/overrides/" + ov.ID + "/delete"

	r := br.post(path, url.Values{"csrf": {tok}})
	wantStatus(t, r, http.StatusOK, "removal without confirmation")
	wantIn(t, r.body, `data-limit="Quota requests" data-before="100,500 hard" data-after="100,000 hard" data-over="1"`, `class="num" data-label="Used this period">100,200 <strong class="over-text">`)
	if strings.Contains(r.body, `data-limit="Quota exports"`) {
		t.Fatal("only the override's meter is shown")
	}
	if ovs, _ := b.ents.ListOverrides(b.ctx, tn.ID); len(ovs) != 1 {
		t.Fatal("the override was removed without confirmation")
	}
	wantRedirect(t, br.post(path, url.Values{"csrf": {tok}, "confirm": {"1"}}), "/admin/tenants/"+tn.ID+"?done=deleted#overrides", "confirmed")
	if ovs, _ := b.ents.ListOverrides(b.ctx, tn.ID); len(ovs) != 0 {
		t.Fatal("the override is still there")
	}
	wantStatus(t, br.post(path, url.Values{"csrf": {tok}}), http.StatusNotFound, "an override already removed")
}
