package web

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// windowRows adds window editor rows ("name limit length kind") to a form.
func windowRows(v url.Values, rows ...string) url.Values {
	for i, r := range rows {
		f := strings.Fields(r)
		name := func(field string) string { return "windows[" + strconv.Itoa(i) + "]." + field }
		for j, field := range []string{"name", "limit", "length", "kind"} {
			if j < len(f) && f[j] != "-" {
				v.Set(name(field), f[j])
			}
		}
	}
	v.Set("window_rows", strconv.Itoa(len(rows)))
	return v
}

// TestConsolePlanWindowEditor: the plan form creates a plan with windows,
// shows them on the plan's page, edits them (a confirmation names the
// change; a removed row is dropped) and refuses bad rows with the
// service's field errors, mapped to the form's rows.
func TestConsolePlanWindowEditor(t *testing.T) {
	b := setup(t)
	br, tok := b.adminBrowser(t)
	wantIn(t, br.get("/admin/plans").body, `id="window-editor"`, `name="windows[0].name" value=""`)

	key := uniq("win")
	form := windowRows(quotaRows(url.Values{"csrf": {tok}, "key": {key}}, "requests 1000 hard"),
		"hourly 5000 60m fixed", "per-minute 60 1m sliding", "- - - sliding")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+key+"?done=created", "create with windows")
	p, err := b.cat.GetPlan(b.ctx, key)
	want := []catalogue.PlanWindow{{Name: "hourly", Limit: 5000, Length: "1h", Kind: "fixed"}, {Name: "per-minute", Limit: 60, Length: "1m", Kind: "sliding"}}
	if err != nil || !slices.Equal(p.Windows, want) {
		t.Fatalf("created windows %+v (%v), want %+v", p.Windows, err, want)
	}
	page := br.get("/admin/plans/" + key)
	wantIn(t, page.body, `name="windows[0].name" value="hourly"`, `name="windows[0].length" value="1h"`,
		`name="windows[1].limit" value="60"`, `name="window_rows" value="3"`)
	wantIn(t, br.get("/admin/plans").body, `data-window="hourly">hourly: 5,000 per 1h`)

	// An edit: hourly goes, per-minute becomes 120; confirmed first.
	edit := windowRows(quotaRows(url.Values{"csrf": {tok}, "name": {key}}, "requests 1000 hard"),
		"hourly 5000 1h fixed", "per-minute 120 1m sliding")
	edit.Set("windows[0].remove", "1")
	r := br.post("/admin/plans/"+key, edit)
	wantStatus(t, r, http.StatusOK, "edit without confirmation")
	wantIn(t, r.body, `data-limit="Windows" data-before="hourly 5,000 per 1h (fixed); per-minute 60 per 1m (sliding)" data-after="per-minute 120 per 1m (sliding)"`)
	edit.Set("confirm", "1")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "confirmed")
	if p, _ := b.cat.GetPlan(b.ctx, key); !slices.Equal(p.Windows, []catalogue.PlanWindow{{Name: "per-minute", Limit: 120, Length: "1m", Kind: "sliding"}}) {
		t.Fatalf("edited windows %+v", p.Windows)
	}
	// A form without the window editor (a script of before windows)
	// leaves them as they are.
	old := quotaRows(url.Values{"csrf": {tok}, "name": {key}, "confirm": {"1"}}, "requests 2000 hard")
	wantRedirect(t, br.post("/admin/plans/"+key, old), "/admin/plans/"+key+"?done=edited", "edit without windows")
	if p, _ := b.cat.GetPlan(b.ctx, key); len(p.Windows) != 1 || p.Quotas["requests"].Limit != 2000 {
		t.Fatalf("a form without windows changed them: %+v", p.Windows)
	}

	// Bad rows: the service's errors, on the form's rows (row 0 is
	// removed, so the service's windows[0] is the form's row 1).
	bad := windowRows(quotaRows(url.Values{"csrf": {tok}, "name": {key}}, "requests 10 hard"),
		"gone 1 1h sliding", "Hourly 5 1h sliding", "daily 0 25x rolling", "requests 5 1h fixed", "many lots 1h fixed")
	bad.Set("windows[0].remove", "1")
	r = br.post("/admin/plans/"+key, bad)
	wantStatus(t, r, http.StatusBadRequest, "bad window rows")
	wantIn(t, r.body, "<strong>windows[4].limit</strong>: window row 5: must be a whole number", `data-window-error="4"`)
	if strings.Contains(r.body, `id="confirm-button"`) {
		t.Fatal("a bad form reached the confirmation")
	}
	bad.Set("windows[4].limit", "7")
	r = br.post("/admin/plans/"+key, bad)
	wantStatus(t, r, http.StatusBadRequest, "bad window rows")
	wantIn(t, r.body,
		"<strong>windows[1].name</strong>: window row 2: must match [a-z0-9_-]{1,32}",
		"<strong>windows[2].limit</strong>: window row 3: must be greater than 0",
		"<strong>windows[2].length</strong>: window row 3: must be a duration",
		"<strong>windows[2].kind</strong>: window row 3: must be &#34;sliding&#34; or &#34;fixed&#34;",
		"<strong>windows[3].name</strong>: window row 4: must not be the name of a quota of the plan",
		`data-window-error="1"`, `data-window-error="2"`, `data-window-error="3"`,
		`name="windows[1].name" value="Hourly"`, `name="windows[2].length" value="25x"`)
	if strings.Contains(r.body, `data-window-error="0"`) || strings.Contains(r.body, `data-window-error="4"`) {
		t.Fatal("an error on a row that has none")
	}
	if p, _ := b.cat.GetPlan(b.ctx, key); len(p.Windows) != 1 {
		t.Fatalf("a refused form changed the windows: %+v", p.Windows)
	}
}

// TestConsolePlanChangeShowsWindows: moving a tenant to a plan with
// windows names them in the confirmation's limits before and after.
func TestConsolePlanChangeShowsWindows(t *testing.T) {
	b := setup(t)
	key := uniq("winchg")
	b.plan(t, catalogue.PlanInput{Key: key, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}},
		Windows: catalogue.WindowInputs{{Name: "hourly", Limit: ptr[int64](500), Length: "1h", Kind: "fixed"}}})
	tn := b.tenant(t, "Window Change Co", b.free)
	br, tok := b.adminBrowser(t)
	r := br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"csrf": {tok}, "plan": {key}})
	wantStatus(t, r, http.StatusOK, "plan change without confirmation")
	wantIn(t, r.body, `data-limit="Windows" data-before="none" data-after="hourly 500 per 1h (fixed)"`)
}
