package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The console's plan form sets whether a plan is offered to tenants: a new
// plan is public unless "Internal" is chosen, an edit without the field
// keeps it, and a value other than true/false is refused naming the field.
func TestConsolePlanFormPublic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, tok := b.adminBrowser(t)
	key := uniq("staff")
	form := quotaRows(url.Values{"csrf": {tok}, "key": {key}, "name": {"Staff"}, "public": {"false"}}, "requests 5 hard")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+key+"?done=created", "create internal plan")
	if p, err := b.cat.GetPlan(b.ctx, key); err != nil || p.Public {
		t.Fatalf("plan %+v %v, want internal", p, err)
	}
	page := br.get("/admin/plans/" + key)
	if !strings.Contains(page.body, `<option value="false" selected>`) {
		t.Fatal("the plan form must show the plan as internal")
	}
	if list := br.get("/admin/plans"); !strings.Contains(list.body, `internal</span>`) {
		t.Fatal("the plans list must mark internal plans")
	}
	edit := quotaRows(url.Values{"csrf": {tok}, "name": {"Staff only"}, "confirm": {"1"}}, "requests 6 hard")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "edit without public")
	if p, _ := b.cat.GetPlan(b.ctx, key); p.Public || p.Name != "Staff only" {
		t.Fatalf("an edit without the field must keep the plan internal: %+v", p)
	}
	edit.Set("public", "maybe")
	r := br.post("/admin/plans/"+key, edit)
	wantStatus(t, r, http.StatusBadRequest, "bad public")
	if !strings.Contains(r.body, "<strong>public</strong>") {
		t.Fatalf("the refusal must name the field public:\n%.3000s", r.body)
	}
	edit.Set("public", "true")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "make public")
	if p, _ := b.cat.GetPlan(b.ctx, key); !p.Public {
		t.Fatal("public=true in the form must make the plan public")
	}
	other := uniq("open")
	wantRedirect(t, br.post("/admin/plans", url.Values{"csrf": {tok}, "key": {other}}), "/admin/plans/"+other+"?done=created", "create without public")
	if p, _ := b.cat.GetPlan(b.ctx, other); !p.Public {
		t.Fatal("a plan created without the field must be public")
	}
}
