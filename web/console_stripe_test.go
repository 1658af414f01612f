package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The console shows each event's API version and why a failed event
// failed, and manages add-on grants.
func TestConsoleShowsAPIVersionsFailureReasonsAndAddons(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Initech", b.free)
	ok := fmt.Sprintf("evt_ver_ok_%s", tn.ID[:8])
	bad := fmt.Sprintf("evt_ver_bad_%s", tn.ID[:8])
	for _, ev := range []struct{ id, version, status, lastErr string }{
		{ok, "2025-03-31.basil", "processed", ""},
		{bad, "2025-09-30.clover", "failed", "subscription sub_x has 2 items whose prices map to plans; exactly one item may carry the plan"},
	} {
		var le any
		if ev.lastErr != "" {
			le = ev.lastErr
		}
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO stripe_events (id, type, api_version, stripe_customer_id, tenant_id, event_created, payload, status, last_error)
			VALUES ($1, 'customer.subscription.updated', $2, 'cus_initech', $3, now(), '{}', $4, $5)`, ev.id, ev.version, tn.ID, ev.status, le); err != nil {
			t.Fatal(err)
		}
	}
	br, tok := b.adminBrowser(t)
	list := br.get("/admin/events")
	wantStatus(t, list, http.StatusOK, "events")
	if !strings.Contains(list.body, "2025-03-31.basil") || !strings.Contains(list.body, "2025-09-30.clover") || !strings.Contains(list.body, "API version") {
		t.Fatal("the events list must show each event's API version")
	}
	page := br.get("/admin/events/" + bad)
	if !strings.Contains(page.body, "2025-09-30.clover") || !strings.Contains(page.body, "Why it failed") || !strings.Contains(page.body, "exactly one item may carry the plan") {
		t.Fatalf("the event page must show the version and why it failed")
	}

	price := "price_console_addon_" + tn.ID[:8]
	form := url.Values{"csrf": {tok}, "stripe_price_id": {price}, "name": {"Extra exports"}, "quotas": {"exports 10\nrequests 500"}, "features": {"priority"}}
	wantRedirect(t, br.post("/admin/addons", form), "/admin/addons?done=addon", "save add-on")
	a, err := b.cat.GetAddon(b.ctx, price)
	if err != nil || a.Quotas["exports"] != 10 || a.Quotas["requests"] != 500 || len(a.Features) != 1 {
		t.Fatalf("saved add-on %+v %v", a, err)
	}
	addons := br.get("/admin/addons")
	if !strings.Contains(addons.body, price) || !strings.Contains(addons.body, "Extra exports") {
		t.Fatal("the add-ons page must list the grant")
	}
	badForm := url.Values{"csrf": {tok}, "stripe_price_id": {price}, "name": {"x"}, "quotas": {"exports lots"}}
	wantStatus(t, br.post("/admin/addons", badForm), http.StatusBadRequest, "bad add-on line")
	neg := url.Values{"csrf": {tok}, "stripe_price_id": {price}, "name": {"x"}, "quotas": {"exports -1"}}
	if r := br.post("/admin/addons", neg); r.status != http.StatusBadRequest || !strings.Contains(r.body, "quotas.exports") {
		t.Fatalf("negative extra: %d, want 400 naming quotas.exports", r.status)
	}
	wantRedirect(t, br.post("/admin/addons/"+price+"/delete", url.Values{"csrf": {tok}}), "/admin/addons?done=unaddon#"+price, "delete add-on")
	if _, err := b.cat.GetAddon(b.ctx, price); err == nil {
		t.Fatal("the add-on was not removed")
	}
}

// A plan quota can be per seat from the console's plan form too.
func TestConsolePlanFormPerSeatQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br, tok := b.adminBrowser(t)
	key := uniq("seats")
	form := quotaRows(url.Values{"csrf": {tok}, "key": {key}, "name": {"Seats"}}, "requests 100 hard per_seat", "exports 5 hard")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+key+"?done=created", "create per-seat plan")
	p, err := b.cat.GetPlan(b.ctx, key)
	if err != nil || !p.Quotas["requests"].PerSeat || p.Quotas["exports"].PerSeat {
		t.Fatalf("plan %+v %v, want requests per seat and exports not", p.Quotas, err)
	}
	page := br.get("/admin/plans/" + key)
	if !strings.Contains(page.body, `name="quotas[1].per_seat" value="1" checked`) {
		t.Fatal("the plan form must show per_seat")
	}
	edit := quotaRows(url.Values{"csrf": {tok}, "name": {"Seats"}, "confirm": {"1"}}, "requests 100 hard")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "edit plan")
	if p, _ := b.cat.GetPlan(b.ctx, key); p.Quotas["requests"].PerSeat {
		t.Fatal("removing per_seat in the form must clear it")
	}
}
