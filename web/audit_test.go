package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
)

type auditList struct {
	Entries []audit.Entry `json:"entries"`
	Next    string        `json:"next"`
}

func planOf(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s struct{ Plan string }
	_ = json.Unmarshal(raw, &s)
	return s.Plan
}

// Every admin action through the API or the console is recorded with who
// (the named credential), when, what and the state before and after.
func TestAuditTrail(t *testing.T) {
	b := setup(t)
	tn := b.tenant(t, "Audited Co", b.free)
	base := b.srv.URL
	// Through the API, as alice.
	if st := apiJSON(t, http.MethodPut, base+"/admin/v1/tenants/"+tn.ID+"/plan", b.alice, `{"plan": "`+b.pro+`"}`, nil); st != http.StatusOK {
		t.Fatalf("plan change: %d", st)
	}
	var ov struct{ ID string }
	if st := apiJSON(t, http.MethodPost, base+"/admin/v1/tenants/"+tn.ID+"/overrides", b.alice, `{"meter": "requests", "extra": 5000, "reason": "launch"}`, &ov); st != http.StatusCreated {
		t.Fatalf("override: %d", st)
	}
	var key struct{ ID string }
	if st := apiJSON(t, http.MethodPost, base+"/admin/v1/tenants/"+tn.ID+"/api-keys", b.alice, `{"name": "ci"}`, &key); st != http.StatusCreated {
		t.Fatalf("key: %d", st)
	}
	if st := apiJSON(t, http.MethodDelete, base+"/admin/v1/api-keys/"+key.ID, b.admin, "", nil); st != http.StatusNoContent && st != http.StatusOK {
		t.Fatalf("revoke: %d", st)
	}
	if st := apiJSON(t, http.MethodPatch, base+"/admin/v1/plans/"+b.pro, b.alice, `{"name": "Pro Plus"}`, nil); st != http.StatusOK {
		t.Fatalf("plan edit: %d", st)
	}
	// A refused action is not recorded.
	if st := apiJSON(t, http.MethodPut, base+"/admin/v1/tenants/"+tn.ID+"/plan", b.alice, `{"plan": "no-such-plan"}`, nil); st < 400 {
		t.Fatalf("bad plan change: %d", st)
	}

	var l auditList
	if st := apiJSON(t, http.MethodGet, base+"/admin/v1/audit?tenant="+tn.ID, b.admin, "", &l); st != http.StatusOK {
		t.Fatalf("audit: %d", st)
	}
	var actions []string
	for _, e := range l.Entries {
		actions = append(actions, e.Actor+":"+e.Via+":"+e.Action)
	}
	if got := strings.Join(actions, ","); got != "admin:api:api_key.revoke,alice:api:api_key.issue,alice:api:override.create,alice:api:tenant.plan_change" {
		t.Fatalf("trail of the tenant: %s", got)
	}
	change := l.Entries[3]
	if planOf(t, change.Before) != b.free || planOf(t, change.After) != b.pro || change.At.IsZero() {
		t.Fatalf("plan change before %s after %s", change.Before, change.After)
	}
	if !strings.Contains(string(l.Entries[2].After), `"reason":"launch"`) || strings.Contains(string(l.Entries[2].Before), "launch") {
		t.Fatalf("override before %s after %s", l.Entries[2].Before, l.Entries[2].After)
	}
	if l.Entries[0].Target != key.ID || !strings.Contains(string(l.Entries[0].After), `"revoked":true`) {
		t.Fatalf("revoke entry %+v", l.Entries[0])
	}
	// Filters: plan, actor.
	if st := apiJSON(t, http.MethodGet, base+"/admin/v1/audit?plan="+b.pro, b.admin, "", &l); st != http.StatusOK || len(l.Entries) != 1 || l.Entries[0].Action != "plan.edit" ||
		!strings.Contains(string(l.Entries[0].Before), `"name":"Pro"`) || !strings.Contains(string(l.Entries[0].After), `"name":"Pro Plus"`) {
		t.Fatalf("plan filter: %d %+v", st, l.Entries)
	}
	if st := apiJSON(t, http.MethodGet, base+"/admin/v1/audit?actor=admin&limit=1", b.admin, "", &l); st != http.StatusOK || len(l.Entries) != 1 || l.Entries[0].Actor != "admin" || l.Next == "" {
		t.Fatalf("actor filter: %d %+v", st, l)
	}
	// Bad input names the field.
	for q, field := range map[string]string{"tenant=nope": "tenant", "limit=0": "limit", "limit=x": "limit", "before=-1": "before"} {
		var p struct {
			Errors []struct{ Field string }
		}
		if st := apiJSON(t, http.MethodGet, base+"/admin/v1/audit?"+q, b.admin, "", &p); st != http.StatusBadRequest || len(p.Errors) == 0 || p.Errors[0].Field != field {
			t.Errorf("?%s: %d %+v, want 400 naming %s", q, st, p, field)
		}
	}
	// A wrong token is no actor.
	if st := apiJSON(t, http.MethodGet, base+"/admin/v1/audit", "tga_wrong_token_123456", "", nil); st != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", st)
	}

	// Through the console, as alice: recorded under her name, via console.
	br := b.browser(t)
	wantRedirect(t, br.loginAdmin(b.alice), "/admin/tenants", "alice logs in")
	page := br.get("/admin/tenants/" + tn.ID)
	wantStatus(t, page, http.StatusOK, "tenant page")
	tok := csrf(t, page.body)
	r := br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"csrf": {tok}, "plan": {b.free}, "confirm": {"1"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("console plan change: %d\n%.2000s", r.status, r.body)
	}
	if st := apiJSON(t, http.MethodGet, base+"/admin/v1/audit?tenant="+tn.ID+"&limit=1", b.admin, "", &l); st != http.StatusOK ||
		l.Entries[0].Actor != "alice" || l.Entries[0].Via != "console" || planOf(t, l.Entries[0].After) != b.free {
		t.Fatalf("console entry: %+v", l.Entries)
	}
	// The tenant's page shows its trail; the audit page filters.
	page = br.get("/admin/tenants/" + tn.ID)
	if !strings.Contains(page.body, `data-audit="tenant.plan_change" data-actor="alice"`) || !strings.Contains(page.body, `data-audit="override.create"`) {
		t.Fatalf("tenant page lacks its trail:\n%.3000s", page.body)
	}
	ap := br.get("/admin/audit?actor=admin")
	wantStatus(t, ap, http.StatusOK, "audit page")
	if !strings.Contains(ap.body, `data-audit="api_key.revoke" data-actor="admin"`) || strings.Contains(ap.body, `data-actor="alice"`) {
		t.Fatalf("audit page filtered by actor:\n%.3000s", ap.body)
	}
}
