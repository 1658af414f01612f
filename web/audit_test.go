package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/stripemock"
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
	t.Parallel()
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

var (
	newKeyRe  = regexp.MustCompile(`id="newkey" class="mono" type="text" readonly value="([^"]+)"`)
	newLinkRe = regexp.MustCompile(`id="dash-link" type="text" readonly value="([^"]+)"`)
)

// stateField is one top-level field of a recorded state as compact JSON;
// "" when the state is null or has no such field.
func stateField(raw json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return string(m[key])
}

// Every console action is recorded under the session's credential name,
// via console, with its subject's state before and after; what the page
// hands out (a key, a link) never reaches the trail, and a confirmation
// page changes nothing and records nothing.
func TestConsoleAuditRecordsEachAction(t *testing.T) {
	// Not parallel: it reads the trail of the actor "alice", whom other
	// tests' bundles name too.
	b := setup(t, setupOpts{stripeBase: stripemock.Start(t)})
	tn, err := b.ents.CreateTenant(b.ctx, entitlements.TenantInput{Name: "Console Audit Co", Plan: b.free, StripeCustomerID: "cus_" + uniq("audit")})
	if err != nil {
		t.Fatal(err)
	}
	ov, err := b.ents.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](10), Reason: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	br := b.browser(t)
	wantRedirect(t, br.loginAdmin(b.alice), "/admin/tenants", "alice logs in")
	tok := csrf(t, br.get("/admin/tenants/"+tn.ID).body)
	// The package's tests share one database: this test's entries are
	// those after the newest one of before.
	var lastID int64
	if es, err := b.trail.List(b.ctx, audit.Filter{Actor: "alice", Limit: 1}); err != nil {
		t.Fatal(err)
	} else if len(es) == 1 {
		lastID = es[0].ID
	}
	price := "price_" + uniq("console")
	var key, link string

	for _, c := range []struct {
		name string
		act  func(t *testing.T)
		// action, tenant and target the entry names (evaluated after act).
		action         string
		tenant, target func() string
		// before and after: field → compact JSON; nil = a null state.
		before, after func() map[string]string
	}{{
		name: "api_key.issue",
		act: func(t *testing.T) {
			r := br.post("/admin/tenants/"+tn.ID+"/keys", url.Values{"csrf": {tok}, "name": {"ci"}})
			wantStatus(t, r, http.StatusCreated, "issue key")
			if m := newKeyRe.FindStringSubmatch(r.body); m != nil {
				key = m[1]
			}
		},
		action: "api_key.issue", tenant: func() string { return tn.ID }, target: func() string { return keyID(t, b, tn.ID) },
		before: func() map[string]string { return map[string]string{"api_keys": `[]`} },
		after: func() map[string]string {
			return map[string]string{"api_keys": `[{"id":"` + keyID(t, b, tn.ID) + `","name":"ci","prefix":"` + key[:12] + `","revoked":false}]`}
		},
	}, {
		name: "dashboard_link.issue",
		act: func(t *testing.T) {
			r := br.post("/admin/tenants/"+tn.ID+"/dashboard-link", url.Values{"csrf": {tok}})
			wantStatus(t, r, http.StatusCreated, "dashboard link")
			if m := newLinkRe.FindStringSubmatch(r.body); m != nil {
				link = m[1]
			}
		},
		action: "dashboard_link.issue", tenant: func() string { return tn.ID }, target: none,
		before: func() map[string]string { return map[string]string{"name": `"Console Audit Co"`} },
		after:  func() map[string]string { return map[string]string{"name": `"Console Audit Co"`} },
	}, {
		name: "override.delete",
		act: func(t *testing.T) {
			path := "/admin/tenants/" + tn.ID + "/overrides/" + ov.ID + "/delete"
			wantStatus(t, br.post(path, url.Values{"csrf": {tok}}), http.StatusOK, "removal's confirmation")
			wantRedirect(t, br.post(path, url.Values{"csrf": {tok}, "confirm": {"1"}}), "/admin/tenants/"+tn.ID+"?done=deleted#overrides", "removal")
		},
		action: "override.delete", tenant: func() string { return tn.ID }, target: func() string { return ov.ID },
		before: func() map[string]string {
			return map[string]string{"overrides": `[{"id":"` + ov.ID + `","mode":null,"extra":10,"limit":null,"meter":"requests","reason":"audit","expires_at":null}]`}
		},
		after: func() map[string]string { return map[string]string{"overrides": `[]`} },
	}, {
		// stripe-mock answers the customer's reads with canned objects.
		name: "tenant.resync",
		act: func(t *testing.T) {
			wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/resync", url.Values{"csrf": {tok}}), http.StatusOK, "resync")
		},
		action: "tenant.resync", tenant: func() string { return tn.ID }, target: none,
		before: func() map[string]string { return map[string]string{"name": `"Console Audit Co"`} },
		after:  func() map[string]string { return map[string]string{"name": `"Console Audit Co"`} },
	}, {
		name: "addon.put creates",
		act: func(t *testing.T) {
			wantRedirect(t, br.post("/admin/addons", url.Values{"csrf": {tok}, "stripe_price_id": {" " + price + " "}, "name": {"Boost"}, "quotas": {"requests 1000"}}),
				"/admin/addons?done=addon", "add-on")
		},
		action: "addon.put", tenant: none, target: func() string { return price },
		before: func() map[string]string { return nil },
		after: func() map[string]string {
			return map[string]string{"name": `"Boost"`, "quotas": `{"requests":1000}`, "features": `[]`}
		},
	}, {
		name: "addon.put replaces",
		act: func(t *testing.T) {
			wantRedirect(t, br.post("/admin/addons", url.Values{"csrf": {tok}, "stripe_price_id": {price}, "name": {"Boost"}, "quotas": {"requests 5000"}, "features": {"exports"}}),
				"/admin/addons?done=addon", "add-on replaced")
		},
		action: "addon.put", tenant: none, target: func() string { return price },
		before: func() map[string]string { return map[string]string{"quotas": `{"requests":1000}`, "features": `[]`} },
		after: func() map[string]string {
			return map[string]string{"quotas": `{"requests":5000}`, "features": `["exports"]`}
		},
	}, {
		name: "addon.delete",
		act: func(t *testing.T) {
			wantRedirect(t, br.post("/admin/addons/"+price+"/delete", url.Values{"csrf": {tok}}), "/admin/addons?done=unaddon#"+price, "add-on removed")
		},
		action: "addon.delete", tenant: none, target: func() string { return price },
		before: func() map[string]string { return map[string]string{"name": `"Boost"`, "quotas": `{"requests":5000}`} },
		after:  func() map[string]string { return nil },
	}} {
		t.Run(c.name, func(t *testing.T) {
			c.act(t)
			es, err := b.trail.List(b.ctx, audit.Filter{Actor: "alice", Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) == 0 || es[0].ID <= lastID {
				t.Fatal("nothing recorded")
			}
			if len(es) > 1 && es[1].ID > lastID {
				t.Fatalf("more than one entry: %s then %s", es[1].Action, es[0].Action)
			}
			e := es[0]
			lastID = e.ID
			if e.Actor != "alice" || e.Via != audit.ViaConsole || e.Action != c.action || e.At.IsZero() || e.TenantID != c.tenant() || e.Target != c.target() {
				t.Fatalf("entry %s %s %s tenant %q target %q, want %s by alice via console, tenant %q target %q",
					e.Actor, e.Via, e.Action, e.TenantID, e.Target, c.action, c.tenant(), c.target())
			}
			for what, st := range map[string]struct {
				raw  json.RawMessage
				want map[string]string
			}{"before": {e.Before, c.before()}, "after": {e.After, c.after()}} {
				if st.want == nil {
					if string(st.raw) != "null" {
						t.Errorf("%s = %s, want null", what, st.raw)
					}
					continue
				}
				for k, want := range st.want {
					if got := stateField(st.raw, k); got != want {
						t.Errorf("%s.%s = %s, want %s (state %s)", what, k, got, want, st.raw)
					}
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	// What the pages handed out is nowhere in the trail.
	u, err := url.Parse(link)
	if err != nil || len(key) < 20 || len(u.Query().Get("token")) < 20 {
		t.Fatalf("key %q, link %q: not found on the pages", key, link)
	}
	es, err := b.trail.List(b.ctx, audit.Filter{TenantID: tn.ID})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(es)
	for what, secret := range map[string]string{"API key": key, "dashboard link token": u.Query().Get("token")} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the trail holds the %s", what)
		}
	}
}

// keyID is the id of the tenant's only API key.
func keyID(t *testing.T, b *bundle, tenantID string) string {
	t.Helper()
	var id string
	if err := b.pool.QueryRow(b.ctx, `SELECT id::text FROM api_keys WHERE tenant_id = $1`, tenantID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func none() string { return "" }
