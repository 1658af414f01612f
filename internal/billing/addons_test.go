package billing_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
)

// Add-on prices grant extra quota (× the item's quantity) and features while
// the subscription is live; a plan's quota may count per seat (× the plan
// item's quantity). Managed through the admin API.
func TestAddonGrantsAndPerSeatQuotasFollowTheSubscription(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	ctx := context.Background()
	if _, err := e.cat.GetPlan(ctx, "seats"); err != nil {
		lim100, lim5 := int64(100), int64(5)
		_, err := e.cat.CreatePlan(ctx, catalogue.PlanInput{Key: "seats", Name: "Seats", StripePriceID: "price_seats_test",
			Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &lim100, PerSeat: true}, "exports": {Limit: &lim5}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	addon := "price_addon_exports_" + strings.ToLower(newCustomer()[5:12])
	r := e.admin(http.MethodPut, "/admin/v1/addons/"+addon, []byte(`{"name":"More exports","quotas":{"exports":10,"unlimited_meter":7},"features":["priority"]}`))
	if r.Status != http.StatusCreated || r.Body["stripe_price_id"] != addon {
		t.Fatalf("put add-on: %d %s", r.Status, r.Raw)
	}
	cus, sub := newCustomer(), "sub_addon_"+newCustomer()
	tenant := e.tenant("free", cus)
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	start, end := base.Add(-time.Hour), base.Add(-time.Hour).AddDate(0, 1, 0)
	p := vev{version: "2025-03-31.basil", sub: sub, cus: cus, price: "price_seats_test", qty: 3, status: "active", start: start, end: end,
		typ: "customer.subscription.created", id: newEventID(t), created: base,
		extraItems: []map[string]any{{"id": "si_addon_" + sub, "object": "subscription_item", "price": map[string]any{"id": addon},
			"quantity": 2, "current_period_start": start.Unix(), "current_period_end": end.Unix()}}}
	e.processed(versioned(t, "subscription", p))
	snap := e.snapshot(tenant)
	if snap.Plan != "seats" || snap.Quotas["requests"].Limit != 300 || snap.Quotas["exports"].Limit != 25 || !slices.Contains(snap.Features, "priority") {
		t.Fatalf("snapshot %+v, want requests 3×100, exports 5+2×10, feature priority", snap)
	}
	if _, ok := snap.Quotas["unlimited_meter"]; ok {
		t.Fatalf("an add-on limited a meter the plan leaves unlimited: %+v", snap.Quotas)
	}
	tn := e.admin(http.MethodGet, "/admin/v1/tenants/"+tenant, nil)
	if !strings.Contains(tn.Raw, `"seats":3`) || !strings.Contains(tn.Raw, addon) {
		t.Fatalf("tenant detail does not show seats and add-ons: %s", tn.Raw)
	}
	// Changing the grant reaches the tenant at once.
	v := e.version(tenant)
	if r := e.admin(http.MethodPut, "/admin/v1/addons/"+addon, []byte(`{"name":"More exports","quotas":{"exports":1}}`)); r.Status != http.StatusOK {
		t.Fatalf("replace add-on: %d %s", r.Status, r.Raw)
	}
	if snap := e.snapshot(tenant); snap.Quotas["exports"].Limit != 7 || slices.Contains(snap.Features, "priority") || e.version(tenant) != v+1 {
		t.Fatalf("after replacing the grant: %+v version %d→%d", snap, v, e.version(tenant))
	}
	// A subscription that stops paying loses plan, seats and add-ons.
	p.typ, p.id, p.created, p.status = "customer.subscription.updated", newEventID(t), base.Add(time.Second), "unpaid"
	e.processed(versioned(t, "subscription", p))
	if snap := e.snapshot(tenant); snap.Plan != "free" || snap.Quotas["exports"].Limit == 7 {
		t.Fatalf("unpaid: %+v", snap)
	}
	p.typ, p.id, p.created, p.status = "customer.subscription.updated", newEventID(t), base.Add(2*time.Second), "active"
	e.processed(versioned(t, "subscription", p))
	if r := e.admin(http.MethodDelete, "/admin/v1/addons/"+addon, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete add-on: %d %s", r.Status, r.Raw)
	}
	if snap := e.snapshot(tenant); snap.Quotas["exports"].Limit != 5 {
		t.Fatalf("after deleting the grant: %+v", snap.Quotas)
	}
	list := e.admin(http.MethodGet, "/admin/v1/addons", nil)
	if list.Status != http.StatusOK || strings.Contains(list.Raw, addon) {
		t.Fatalf("list after delete: %d %s", list.Status, list.Raw)
	}
	// Bad input names the field.
	for body, field := range map[string]string{
		`{"name":"x","quotas":{"exports":-1}}`:  "quotas.exports",
		`{"name":"","quotas":{"exports":1}}`:    `"name"`,
		`{"name":"x"}`:                          "quotas",
		`{"name":"x","quotas":{"Bad Meter":1}}`: "quotas.Bad Meter",
	} {
		if r := e.admin(http.MethodPut, "/admin/v1/addons/"+addon, []byte(body)); r.Status != http.StatusBadRequest || !strings.Contains(r.Raw, field) {
			t.Fatalf("%s: %d %s, want 400 naming %s", body, r.Status, r.Raw, field)
		}
	}
	if r := e.admin(http.MethodPut, "/admin/v1/addons/price_pro_test", []byte(`{"name":"x","quotas":{"exports":1}}`)); r.Status != http.StatusConflict || !strings.Contains(r.Raw, "price_pro_test is already mapped to plan pro") {
		t.Fatalf("a plan's price as an add-on: %d %s, want 409 naming the price and the plan", r.Status, r.Raw)
	}
	if r := e.admin(http.MethodGet, "/admin/v1/addons/price_nope", nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown add-on: %d", r.Status)
	}
}
