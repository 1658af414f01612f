package billing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// externalTenant creates a tenant on free with an external id and no customer.
func (e *env) externalTenant(ext string) string {
	e.t.Helper()
	tn, err := e.ents.CreateTenant(context.Background(), entitlements.TenantInput{Name: "t-" + ext, Plan: "free", ExternalID: ext})
	if err != nil {
		e.t.Fatalf("create tenant: %v", err)
	}
	return tn.ID
}

// Checkout's metadata.tenant_id (and client_reference_id) may carry the
// backend's own id for the tenant: a tenant id first, then an external id.
// Delivered as signed events through the real webhook.
func TestCheckoutMetadataMayCarryAnExternalID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	const v = "2025-03-31.basil"
	customerOf := func(tenant string) any {
		return e.admin(http.MethodGet, "/admin/v1/tenants/"+tenant, nil).Body["stripe_customer_id"]
	}
	checkout := func(cus, ref string, meta map[string]any) vev {
		return vev{version: v, sub: "sub_x_" + cus, cus: cus, price: "price_pro_test", status: "active", start: start, end: end,
			tenant: ref, typ: "checkout.session.completed", id: newEventID(t), created: base,
			mutate: func(o map[string]any) { o["metadata"] = meta }}
	}

	// metadata.tenant_id = an external id links its tenant, and the
	// subscription then gives it the plan.
	ext := "acct:" + newCustomer() + "@eu"
	tenant := e.externalTenant(ext)
	cus := newCustomer()
	q := checkout(cus, "", map[string]any{"tenant_id": ext})
	e.processed(versioned(t, "checkout.session.completed", q))
	if c := customerOf(tenant); c != cus {
		t.Fatalf("checkout by external id: customer %v, want %s", c, cus)
	}
	q.typ, q.id, q.created = "customer.subscription.created", newEventID(t), base.Add(time.Second)
	e.processed(versioned(t, "subscription", q))
	if snap := e.snapshot(tenant); snap.Plan != "pro" {
		t.Fatalf("after the subscription: plan %s", snap.Plan)
	}

	// client_reference_id may carry it too.
	ext2 := "ref_" + newCustomer()
	tenant2 := e.externalTenant(ext2)
	cus2 := newCustomer()
	e.processed(versioned(t, "checkout.session.completed", checkout(cus2, ext2, map[string]any{})))
	if c := customerOf(tenant2); c != cus2 {
		t.Fatalf("client_reference_id by external id: customer %v, want %s", c, cus2)
	}

	// A tenant id wins over an external id equal to it.
	owner := e.tenant("free", "")
	if _, err := e.ents.CreateTenant(context.Background(), entitlements.TenantInput{Name: "shadow", Plan: "free", ExternalID: owner}); err != nil {
		t.Fatal(err)
	}
	cus3 := newCustomer()
	e.processed(versioned(t, "checkout.session.completed", checkout(cus3, "", map[string]any{"tenant_id": owner})))
	if c := customerOf(owner); c != cus3 {
		t.Fatalf("tenant id first: customer %v, want %s", c, cus3)
	}

	// An external id no tenant has is ignored, saying so.
	bad := checkout(newCustomer(), "", map[string]any{"tenant_id": "acct:nobody"})
	e.post(versioned(t, "checkout.session.completed", bad))
	if r := e.waitEvent(bad.id); r.Status != billing.StatusIgnored || !strings.Contains(deref(r.Reason), "external id") {
		t.Fatalf("unknown external id: %s %s", r.Status, deref(r.Reason))
	}

	// A subscription event of an unknown customer links through its own
	// metadata.tenant_id, an external id too.
	ext4 := "sub-ref." + newCustomer()
	tenant4 := e.externalTenant(ext4)
	cus4 := newCustomer()
	s := vev{version: v, sub: "sub_m_" + cus4, cus: cus4, price: "price_team_test", status: "active", start: start, end: end,
		typ: "customer.subscription.created", id: newEventID(t), created: base,
		mutate: func(o map[string]any) { o["metadata"] = map[string]any{"tenant_id": ext4} }}
	e.processed(versioned(t, "subscription", s))
	if c := customerOf(tenant4); c != cus4 || e.snapshot(tenant4).Plan != "team" {
		t.Fatalf("subscription metadata by external id: customer %v, plan %s", c, e.snapshot(tenant4).Plan)
	}
}
