package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// The console creates tenants through the API's function: a good form
// goes to the new tenant's page and is audited; a bad one comes back
// filled in with the reason next to the field, never a 500.
func TestConsoleCreateTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, tok := b.adminBrowser(t)
	wantIn(t, br.get("/admin/tenants").body, `href="/admin/tenants/new"`)
	page := br.get("/admin/tenants/new")
	wantStatus(t, page, http.StatusOK, "new tenant page")
	wantIn(t, page.body, `<option value="`+b.free+`" selected>`, `<option value="`+b.pro+`">`)

	cus := "cus_" + uniq("new")
	r := br.post("/admin/tenants", url.Values{"csrf": {tok}, "name": {"Newco"}, "plan": {b.pro}, "stripe_customer_id": {cus}})
	loc := r.header.Get("Location")
	id, ok := strings.CutPrefix(loc, "/admin/tenants/")
	id, _, _ = strings.Cut(id, "?")
	if r.status != http.StatusSeeOther || !ok || !strings.HasSuffix(loc, "?done=tenant") {
		t.Fatalf("create: %d to %q", r.status, loc)
	}
	tn, err := b.ents.GetTenant(b.ctx, id)
	if err != nil || tn.Name != "Newco" || tn.Plan != b.pro || tn.StripeCustomerID != cus {
		t.Fatalf("created %+v %v", tn, err)
	}
	wantIn(t, br.get(loc).body, "Tenant created.", "<h1>Newco</h1>")
	if es, _ := b.trail.List(b.ctx, audit.Filter{TenantID: id}); len(es) != 1 || es[0].Action != "tenant.create" || !strings.Contains(string(es[0].After), `"name":"Newco"`) {
		t.Fatalf("audit %+v", es)
	}

	// The same Stripe customer again: 409, the form kept, the owner named.
	r = br.post("/admin/tenants", url.Values{"csrf": {tok}, "name": {"Dupe"}, "plan": {b.free}, "stripe_customer_id": {cus}})
	wantStatus(t, r, http.StatusConflict, "duplicate customer")
	wantIn(t, r.body, `data-field-error="stripe_customer_id">another tenant is already linked to this Stripe customer: <a href="/admin/tenants/`+id+`">Newco</a>`,
		`name="name" value="Dupe"`)
	// Bad fields: 400, each named next to its field.
	for _, c := range []struct {
		form  url.Values
		field string
	}{
		{url.Values{"name": {""}}, "name"},
		{url.Values{"name": {strings.Repeat("n", 201)}}, "name"},
		{url.Values{"name": {"Ok"}, "plan": {"no-such-plan"}}, "plan"},
		{url.Values{"name": {"Ok"}, "plan": {"Bad Plan"}}, "plan"},
		{url.Values{"name": {"Ok"}, "stripe_customer_id": {"cus 1"}}, "stripe_customer_id"},
	} {
		c.form.Set("csrf", tok)
		r := br.post("/admin/tenants", c.form)
		wantStatus(t, r, http.StatusBadRequest, c.form.Encode())
		wantIn(t, r.body, `data-field-error="`+c.field+`"`)
	}
	if p, _ := b.ents.ListTenants(b.ctx, entitlements.ListQuery{Q: "Dupe"}); len(p.Tenants) != 0 {
		t.Fatal("a refused form created a tenant")
	}
	wantStatus(t, br.post("/admin/tenants", url.Values{"name": {"No Csrf"}}), http.StatusForbidden, "without csrf")
}
