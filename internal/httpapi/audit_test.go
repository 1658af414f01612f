package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/stripemock"
	"github.com/tollgatehq/tollgate/web"
)

// auditAPI is an api instance with the audit trail, billing on stripe-mock
// (replay, resync) and dashboard links wired, and a named admin credential.
func auditAPI(t *testing.T, actor, token string) *testAPI {
	t.Helper()
	stripeBase := stripemock.Start(t)
	return newTestAPI(t, testAPIOptions{Deps: func(d *Deps) {
		d.AdminTokens = map[string]string{actor: token}
		d.Audit = audit.New(d.DB, d.Log)
		ins, err := jobs.NewInsertClient(d.DB, d.Log)
		if err != nil {
			t.Fatal(err)
		}
		b, err := billing.New(d.DB, d.Entitlements, d.Catalogue, ins, d.Log, billing.Options{SecretKey: "sk_test_123", APIBase: stripeBase, StripeTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		d.Billing = b
		readers.Register(d.Audit, d.Entitlements, d.Catalogue, d.Credentials, b, nil)
		// Minting a link reads no counter: the store is never used.
		links, err := web.New(web.Deps{DB: d.DB, Limits: limitstore.New(d.Redis, redistest.Prefix()), Snapshots: d.Entitlements,
			Usage: d.Metering, AdminToken: d.AdminToken, Entitlements: d.Entitlements, Catalogue: d.Catalogue, Credentials: d.Credentials, Billing: b, Metering: d.Metering})
		if err != nil {
			t.Fatal(err)
		}
		d.DashboardLinks = links
	}})
}

// stateField is one top-level field of a recorded state as compact JSON;
// "" when the state is null or has no such field.
func stateField(raw json.RawMessage, key string) string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return string(m[key])
}

// Every admin action of the API is recorded under the name of the
// credential that made it, with its subject and the subject's state before
// and after; secrets handed out (a service token, a dashboard link) never
// reach the trail.
func TestAuditRecordsEveryAdminActionOfTheAPI(t *testing.T) {
	t.Parallel()
	const carolToken = "tga_carol_audit_token_0123456789"
	actor := uniqueName("carol")
	a := auditAPI(t, actor, carolToken)
	as := func(t *testing.T, method, path string, body any, want int) apiResp {
		t.Helper()
		r := a.do(t, method, path, carolToken, body)
		if r.Status != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, r.Status, want, r.Raw)
		}
		return r
	}
	plan := uniqueName("plan")
	price := "price_" + uniqueName("addon")
	event := uniqueName("evt_audit")
	// Named by earlier steps.
	var tenant, override, token, tokenID, link string
	var lastID int64

	for _, c := range []struct {
		name   string
		act    func(t *testing.T)
		action string
		// tenant, plan and target the entry names (evaluated after act).
		tenant, plan, target func() string
		// before and after: field → compact JSON; nil = a null state.
		before, after func() map[string]string
	}{{
		name: "plan.create",
		act: func(t *testing.T) {
			as(t, http.MethodPost, "/admin/v1/plans", map[string]any{"key": plan, "name": "Audited", "quotas": map[string]any{"requests": map[string]any{"limit": 100}}}, http.StatusCreated)
		},
		action: "plan.create", tenant: nothing, plan: func() string { return plan }, target: nothing,
		before: nullState, after: func() map[string]string {
			return map[string]string{"name": `"Audited"`, "quotas": `{"requests":{"mode":"hard","limit":100}}`}
		},
	}, {
		name: "tenant.create",
		act: func(t *testing.T) {
			r := as(t, http.MethodPost, "/admin/v1/tenants", map[string]any{"name": "Audit Co", "plan": plan, "stripe_customer_id": "cus_" + uniqueName("audit")}, http.StatusCreated)
			tenant, _ = r.JSON["id"].(string)
		},
		action: "tenant.create", tenant: func() string { return tenant }, plan: nothing, target: nothing,
		before: nullState, after: func() map[string]string {
			return map[string]string{"name": `"Audit Co"`, "plan": `"` + plan + `"`, "overrides": `[]`}
		},
	}, {
		name: "override.create",
		act: func(t *testing.T) {
			r := as(t, http.MethodPost, "/admin/v1/tenants/"+tenant+"/overrides", map[string]any{"meter": "requests", "extra": 50, "reason": "audit"}, http.StatusCreated)
			override, _ = r.JSON["id"].(string)
		},
		action: "override.create", tenant: func() string { return tenant }, plan: nothing, target: func() string { return override },
		before: func() map[string]string { return map[string]string{"overrides": `[]`} },
		after:  func() map[string]string { return map[string]string{"name": `"Audit Co"`} },
	}, {
		name: "override.delete",
		act: func(t *testing.T) {
			as(t, http.MethodDelete, "/admin/v1/tenants/"+tenant+"/overrides/"+override, nil, http.StatusNoContent)
		},
		action: "override.delete", tenant: func() string { return tenant }, plan: nothing, target: func() string { return override },
		before: func() map[string]string { return map[string]string{"name": `"Audit Co"`} },
		after:  func() map[string]string { return map[string]string{"overrides": `[]`} },
	}, {
		name: "dashboard_link.issue",
		act: func(t *testing.T) {
			r := as(t, http.MethodPost, "/admin/v1/tenants/"+tenant+"/dashboard-links", nil, http.StatusCreated)
			link, _ = r.JSON["url"].(string)
		},
		action: "dashboard_link.issue", tenant: func() string { return tenant }, plan: nothing, target: nothing,
		before: func() map[string]string { return map[string]string{"name": `"Audit Co"`} },
		after:  func() map[string]string { return map[string]string{"name": `"Audit Co"`} },
	}, {
		// stripe-mock answers the customer's reads with canned objects.
		name:   "tenant.resync",
		act:    func(t *testing.T) { as(t, http.MethodPost, "/admin/v1/tenants/"+tenant+"/resync", nil, http.StatusOK) },
		action: "tenant.resync", tenant: func() string { return tenant }, plan: nothing, target: nothing,
		before: func() map[string]string { return map[string]string{"name": `"Audit Co"`} },
		after:  func() map[string]string { return map[string]string{"name": `"Audit Co"`} },
	}, {
		name: "stripe_event.replay",
		act: func(t *testing.T) {
			if _, err := a.Pool.Exec(t.Context(), `
				INSERT INTO stripe_events (id, type, tenant_id, event_created, payload, status, attempts, last_error)
				VALUES ($1, 'customer.subscription.updated', $2, now(), '{}', 'failed', 1, 'boom')`, event, tenant); err != nil {
				t.Fatal(err)
			}
			as(t, http.MethodPost, "/admin/v1/stripe/events/"+event+"/replay", nil, http.StatusAccepted)
		},
		// The event names its tenant; the state is the event's.
		action: "stripe_event.replay", tenant: func() string { return tenant }, plan: nothing, target: func() string { return event },
		before: func() map[string]string { return map[string]string{"status": `"failed"`, "last_error": `"boom"`} },
		after:  func() map[string]string { return map[string]string{"status": `"pending"`} },
	}, {
		name: "addon.put creates",
		act: func(t *testing.T) {
			as(t, http.MethodPut, "/admin/v1/addons/"+price, map[string]any{"name": "Boost", "quotas": map[string]any{"requests": 1000}}, http.StatusCreated)
		},
		action: "addon.put", tenant: nothing, plan: nothing, target: func() string { return price },
		before: nullState, after: func() map[string]string {
			return map[string]string{"name": `"Boost"`, "quotas": `{"requests":1000}`, "features": `[]`}
		},
	}, {
		name: "addon.put replaces",
		act: func(t *testing.T) {
			as(t, http.MethodPut, "/admin/v1/addons/"+price, map[string]any{"name": "Boost", "quotas": map[string]any{"requests": 5000}, "features": []string{"exports"}}, http.StatusOK)
		},
		action: "addon.put", tenant: nothing, plan: nothing, target: func() string { return price },
		before: func() map[string]string { return map[string]string{"quotas": `{"requests":1000}`, "features": `[]`} },
		after: func() map[string]string {
			return map[string]string{"quotas": `{"requests":5000}`, "features": `["exports"]`}
		},
	}, {
		name:   "addon.delete",
		act:    func(t *testing.T) { as(t, http.MethodDelete, "/admin/v1/addons/"+price, nil, http.StatusNoContent) },
		action: "addon.delete", tenant: nothing, plan: nothing, target: func() string { return price },
		before: func() map[string]string { return map[string]string{"name": `"Boost"`, "quotas": `{"requests":5000}`} },
		after:  nullState,
	}, {
		name: "service_token.issue",
		act: func(t *testing.T) {
			r := as(t, http.MethodPost, "/admin/v1/service-tokens", map[string]any{"name": "edge"}, http.StatusCreated)
			token, _ = r.JSON["token"].(string)
			tokenID, _ = r.JSON["id"].(string)
		},
		action: "service_token.issue", tenant: nothing, plan: nothing, target: func() string { return tokenID },
		before: nullState, after: func() map[string]string {
			return map[string]string{"id": `"` + tokenID + `"`, "name": `"edge"`, "revoked": "false"}
		},
	}, {
		name: "service_token.revoke",
		act: func(t *testing.T) {
			as(t, http.MethodDelete, "/admin/v1/service-tokens/"+tokenID, nil, http.StatusNoContent)
		},
		action: "service_token.revoke", tenant: nothing, plan: nothing, target: func() string { return tokenID },
		before: func() map[string]string { return map[string]string{"name": `"edge"`, "revoked": "false"} },
		after:  func() map[string]string { return map[string]string{"name": `"edge"`, "revoked": "true"} },
	}} {
		t.Run(c.name, func(t *testing.T) {
			c.act(t)
			var l struct{ Entries []audit.Entry }
			a.admin(t, http.MethodGet, "/admin/v1/audit?limit=200&actor="+actor, nil, http.StatusOK).Decode(t, &l)
			if len(l.Entries) == 0 {
				t.Fatal("nothing recorded")
			}
			e := l.Entries[0]
			// One entry per action: the newest is this one, the one before
			// is the previous step's.
			if len(l.Entries) > 1 && l.Entries[1].ID != lastID {
				t.Fatalf("more than one entry for %s: %s", c.name, entriesJSON(l.Entries[:2]))
			}
			lastID = e.ID
			if e.Actor != actor || e.Via != audit.ViaAPI || e.Action != c.action || e.At.IsZero() ||
				e.TenantID != c.tenant() || e.PlanKey != c.plan() || e.Target != c.target() {
				t.Fatalf("entry %s, want %s by %s on tenant %q plan %q target %q", entriesJSON([]audit.Entry{e}), c.action, actor, c.tenant(), c.plan(), c.target())
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
	// The credentials handed out are nowhere in the trail.
	raw := a.admin(t, http.MethodGet, "/admin/v1/audit?limit=200&actor="+actor, nil, http.StatusOK).Raw
	_, linkToken, _ := strings.Cut(link, "token=")
	for what, secret := range map[string]string{"service token": token, "service token prefix": token[:12], "dashboard link token": linkToken} {
		if len(secret) < 8 {
			t.Fatalf("%s %q: too short to look for", what, secret)
		}
		if strings.Contains(string(raw), secret) {
			t.Errorf("the trail holds the %s", what)
		}
	}
	// A refused action records nothing.
	as(t, http.MethodPost, "/admin/v1/service-tokens", map[string]any{"name": ""}, http.StatusBadRequest)
	as(t, http.MethodDelete, "/admin/v1/service-tokens/"+tokenID+"0", nil, http.StatusNotFound)
	as(t, http.MethodDelete, "/admin/v1/addons/"+price, nil, http.StatusNotFound)
	var l struct{ Entries []audit.Entry }
	a.admin(t, http.MethodGet, "/admin/v1/audit?limit=1&actor="+actor, nil, http.StatusOK).Decode(t, &l)
	if len(l.Entries) != 1 || l.Entries[0].ID != lastID {
		t.Fatalf("a refused action was recorded: %s", entriesJSON(l.Entries))
	}
}

func entriesJSON(es []audit.Entry) string {
	b, _ := json.Marshal(es)
	return string(b)
}

func nothing() string { return "" }

func nullState() map[string]string { return nil }
