package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
)

// The console creates a tenant with an external id, shows it on the tenant
// page, edits and removes it there (audited), finds the tenant by it, and
// answers a taken or bad one next to the field, never a 500.
func TestConsoleTenantExternalID(t *testing.T) {
	b := setup(t)
	br, tok := b.adminBrowser(t)
	wantIn(t, br.get("/admin/tenants/new").body, `name="external_id"`)
	ext := "acct:" + uniq("ext") + "@eu"
	r := br.post("/admin/tenants", url.Values{"csrf": {tok}, "name": {"Extco"}, "plan": {b.free}, "external_id": {ext}})
	loc := r.header.Get("Location")
	id, _ := strings.CutPrefix(loc, "/admin/tenants/")
	id, _, _ = strings.Cut(id, "?")
	if r.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if tn, err := b.ents.GetTenantRow(b.ctx, id); err != nil || tn.ExternalID == nil || *tn.ExternalID != ext {
		t.Fatalf("created %+v %v", tn, err)
	}
	wantIn(t, br.get("/admin/tenants/"+id).body, `id="tenant-external-id">`+ext+`</dd>`, `id="ext-id" name="external_id" value="`+ext+`"`)
	wantIn(t, br.get("/admin/tenants?q="+url.QueryEscape(ext)).body, `/admin/tenants/`+id)

	// Taken on create: 409, the owner named.
	r = br.post("/admin/tenants", url.Values{"csrf": {tok}, "name": {"Twin"}, "plan": {b.free}, "external_id": {ext}})
	wantStatus(t, r, http.StatusConflict, "duplicate external id")
	wantIn(t, r.body, `data-field-error="external_id">another tenant already has this external id: <a href="/admin/tenants/`+id+`">Extco</a>`, `name="external_id" value="`+ext+`"`)
	r = br.post("/admin/tenants", url.Values{"csrf": {tok}, "name": {"Bad"}, "plan": {b.free}, "external_id": {"a b"}})
	wantStatus(t, r, http.StatusBadRequest, "bad external id")
	wantIn(t, r.body, `data-field-error="external_id"`)

	// Edit on the tenant page.
	other := b.tenant(t, "Other", b.free)
	edit := "/admin/tenants/" + other.ID + "/external-id"
	r = br.post(edit, url.Values{"csrf": {tok}, "external_id": {ext}})
	wantStatus(t, r, http.StatusConflict, "taken on edit")
	wantIn(t, r.body, `data-field-error="external_id">another tenant already has this external id: <a href="/admin/tenants/`+id+`">Extco</a>`)
	r = br.post(edit, url.Values{"csrf": {tok}, "external_id": {"{bad}"}})
	wantStatus(t, r, http.StatusBadRequest, "bad on edit")
	wantIn(t, r.body, `data-field-error="external_id"`, `value="{bad}"`)
	mine := "mine-" + uniq("x")
	r = br.post(edit, url.Values{"csrf": {tok}, "external_id": {mine}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/admin/tenants/"+other.ID+"?done=external" {
		t.Fatalf("edit: %d %q", r.status, r.header.Get("Location"))
	}
	wantIn(t, br.get(r.header.Get("Location")).body, "External id saved", `id="tenant-external-id">`+mine+`</dd>`)
	r = br.post(edit, url.Values{"csrf": {tok}, "external_id": {""}})
	wantStatus(t, r, http.StatusSeeOther, "remove")
	if tn, _ := b.ents.GetTenantRow(b.ctx, other.ID); tn.ExternalID != nil {
		t.Fatalf("not removed: %v", *tn.ExternalID)
	}
	wantIn(t, br.get("/admin/tenants/"+other.ID).body, `id="tenant-external-id">—</dd>`)
	es, _ := b.trail.List(b.ctx, audit.Filter{TenantID: other.ID})
	var edits []string
	for _, e := range es {
		if e.Action == "tenant.edit" {
			edits = append(edits, string(e.After))
		}
	}
	if len(edits) != 2 || !strings.Contains(edits[1], `"external_id": "`+mine+`"`) && !strings.Contains(edits[1], `"external_id":"`+mine+`"`) {
		t.Fatalf("audited edits %v", edits)
	}
	wantStatus(t, br.post(edit, url.Values{"external_id": {"x"}}), http.StatusForbidden, "without csrf")
	wantStatus(t, br.post("/admin/tenants/00000000-0000-4000-8000-000000000000/external-id", url.Values{"csrf": {tok}, "external_id": {"x"}}), http.StatusNotFound, "unknown tenant")
}
