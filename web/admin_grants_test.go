package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
)

// The tenant page's grants panel: a grant is issued from the form (bad
// fields come back named, a meter no plan defines is 422), listed with its
// remaining units, and voided only after a confirmation that says what is
// lost; both are audited with the grant's state before and after.
func TestConsoleGrantsPanel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Credits Co", b.free)
	br, tok := b.adminBrowser(t)
	page := "/admin/tenants/" + tn.ID
	wantIn(t, br.get(page).body, `id="grants"`, "No grants.", `action="/admin/tenants/`+tn.ID+`/grants"`)

	// Bad input: every field named, nothing issued, nothing audited.
	bad := url.Values{"csrf": {tok}, "meter": {"requests"}, "amount": {"-5"}, "priority": {"500"}, "expires_days": {"soon"}}
	r := br.post(page+"/grants", bad)
	wantStatus(t, r, http.StatusBadRequest, "bad grant")
	wantIn(t, r.body, "<strong>expires_days</strong>", `value="-5"`)
	r = br.post(page+"/grants", url.Values{"csrf": {tok}, "meter": {"requests"}, "amount": {"-5"}, "priority": {"500"}})
	wantStatus(t, r, http.StatusBadRequest, "bad amount and priority")
	wantIn(t, r.body, "<strong>amount</strong>", "<strong>priority</strong>")
	r = br.post(page+"/grants", url.Values{"csrf": {tok}, "meter": {"nosuchmeter"}, "amount": {"10"}})
	wantStatus(t, r, http.StatusUnprocessableEntity, "unknown meter")
	wantIn(t, r.body, "<strong>meter</strong>")
	if gs, _ := b.creds.List(b.ctx, tn.ID); len(gs) != 0 {
		t.Fatalf("a refused form issued %+v", gs)
	}

	wantRedirect(t, br.post(page+"/grants", url.Values{"csrf": {tok}, "meter": {"requests"}, "amount": {"5,000"}, "priority": {"10"},
		"expires_days": {"30"}, "reason": {"launch promo"}}), page+"?done=granted#grants", "issue")
	gs, err := b.creds.List(b.ctx, tn.ID)
	if err != nil || len(gs) != 1 || gs[0].Amount != 5000 || gs[0].Priority != 10 || gs[0].ExpiresAt == nil || gs[0].Source != "admin" || gs[0].Reason != "launch promo" {
		t.Fatalf("issued %+v %v", gs, err)
	}
	g := gs[0]
	wantIn(t, br.get(page).body, `data-grant="`+g.ID+`" data-status="active"`, "5,000 of 5,000", "launch promo",
		`action="/admin/tenants/`+tn.ID+`/grants/`+g.ID+`/void"`,
		// "Why these limits" lists it after the quotas, in draw order.
		"Then credit grants, in the order they are drawn", `data-why-grant="`+g.ID+`"`)

	// Void: first the confirmation, which changes nothing.
	r = br.post(page+"/grants/"+g.ID+"/void", url.Values{"csrf": {tok}})
	wantStatus(t, r, http.StatusOK, "void confirmation")
	wantIn(t, r.body, "Void a requests grant of Credits Co?", "5,000 requests units the tenant has not used are lost.", `id="confirm-button"`)
	if cur, _ := b.creds.Get(b.ctx, g.ID); cur.VoidedAt != nil {
		t.Fatal("voided without confirmation")
	}
	// Another tenant's grant is not voidable from this tenant's page.
	other := b.tenant(t, "Other", b.free)
	r = br.post("/admin/tenants/"+other.ID+"/grants/"+g.ID+"/void", url.Values{"csrf": {tok}, "confirm": {"1"}})
	wantStatus(t, r, http.StatusNotFound, "void through another tenant")
	r = br.post(page+"/grants/00000000-0000-4000-8000-000000000000/void", url.Values{"csrf": {tok}, "confirm": {"1"}})
	wantStatus(t, r, http.StatusNotFound, "void of no grant")
	r = br.post(page+"/grants/not-a-uuid/void", url.Values{"csrf": {tok}, "confirm": {"1"}})
	wantStatus(t, r, http.StatusNotFound, "void of a malformed id")
	wantRedirect(t, br.post(page+"/grants/"+g.ID+"/void", url.Values{"csrf": {tok}, "confirm": {"1"}}), page+"?done=voided#grants", "void")
	if cur, _ := b.creds.Get(b.ctx, g.ID); cur.VoidedAt == nil || cur.Voided != 5000 || cur.Remaining != 0 {
		t.Fatalf("after the void: %+v", cur)
	}
	body := br.get(page).body
	wantIn(t, body, `data-grant="`+g.ID+`" data-status="voided"`)
	if strings.Contains(body, `/grants/`+g.ID+`/void"`) || strings.Contains(body, `data-why-grant="`+g.ID+`"`) {
		t.Fatal("a voided grant still offers Void, or is listed as drawn")
	}

	// The trail: one grant.create and one grant.void, each with the
	// grant's own state (credits'), not the tenant's.
	es, err := b.trail.List(b.ctx, audit.Filter{TenantID: tn.ID})
	if err != nil {
		t.Fatal(err)
	}
	byAction := map[string]audit.Entry{}
	for _, e := range es {
		byAction[e.Action] = e
	}
	if len(es) != 2 {
		t.Fatalf("audit %d entries, want grant.create and grant.void: %+v", len(es), es)
	}
	state := func(raw json.RawMessage) (s struct {
		ID        string
		Remaining int64
		Voided    int64
	}) {
		_ = json.Unmarshal(raw, &s)
		return s
	}
	c, v := byAction["grant.create"], byAction["grant.void"]
	if c.Target != g.ID || (c.Before != nil && string(c.Before) != "null") || state(c.After).ID != g.ID || state(c.After).Remaining != 5000 {
		t.Errorf("grant.create entry: target %q before %s after %s", c.Target, c.Before, c.After)
	}
	if v.Target != g.ID || state(v.Before).Remaining != 5000 || state(v.After).Voided != 5000 {
		t.Errorf("grant.void entry: target %q before %s after %s", v.Target, v.Before, v.After)
	}
}
