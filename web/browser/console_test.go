package browser_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In Chromium, the safer console's main flows: create a tenant, change its
// plan through the confirmation that shows the new limits, add a quota row
// to a plan and save it, open a failed event's page, and replay failed
// events in bulk.
func TestBrowserSaferConsole(t *testing.T) {
	chrome := newChrome(t)
	b := setup(t)
	base := b.srv.URL
	admin := b.consoleTab(t, chrome, b.Admin)

	var id string
	cus := "cus_" + uniq("browser")
	t.Run("create a tenant", func(t *testing.T) {
		step(t, admin, "tenants", chromedp.Navigate(base+"/admin/tenants"))
		step(t, admin, "new tenant", chromedp.Click(chromedp.CSS("#new-tenant")))
		do(t, admin, "fill", chromedp.SetValue(chromedp.CSS("#tn-name"), "Browser Co"),
			chromedp.SetValue(chromedp.CSS("#tn-plan"), b.Free), chromedp.SetValue(chromedp.CSS("#tn-cus"), cus))
		screenshot(t, admin, "admin-tenant-new-1280", 1280)
		screenshot(t, admin, "admin-tenant-new-375", 375)
		if st := step(t, admin, "create", chromedp.Click(chromedp.CSS("#create-tenant"))); st != http.StatusOK {
			t.Fatalf("create: %d", st)
		}
		loc := location(t, admin)
		rest, ok := strings.CutPrefix(loc, base+"/admin/tenants/")
		id, _, _ = strings.Cut(rest, "?")
		if !ok || text(t, admin, "h1") != "Browser Co" {
			t.Fatalf("at %s after create", loc)
		}
		// The same customer again: the reason next to the field.
		step(t, admin, "new tenant", chromedp.Navigate(base+"/admin/tenants/new"))
		do(t, admin, "fill", chromedp.SetValue(chromedp.CSS("#tn-name"), "Twin Co"), chromedp.SetValue(chromedp.CSS("#tn-cus"), cus))
		if st := step(t, admin, "create twin", chromedp.Click(chromedp.CSS("#create-tenant"))); st != http.StatusConflict {
			t.Fatalf("duplicate customer: %d, want 409", st)
		}
		if msg := text(t, admin, "#tn-cus-err"); !strings.Contains(msg, "Browser Co") {
			t.Fatalf("the field's error says %q", msg)
		}
	})

	t.Run("plan change shows the new limits before it is made", func(t *testing.T) {
		step(t, admin, "tenant page", chromedp.Navigate(base+"/admin/tenants/"+id))
		do(t, admin, "choose plan", chromedp.SetValue(chromedp.CSS("#plan-select"), b.Pro))
		if st := step(t, admin, "change", chromedp.Click(chromedp.CSS("#change-plan"))); st != http.StatusOK {
			t.Fatalf("change: %d", st)
		}
		after := run(t, admin, "effect", chromedp.Evaluate[string](`[...document.querySelectorAll('#effect tr[data-limit]')].map(r => r.dataset.limit + ': ' + r.dataset.before + ' -> ' + r.dataset.after).join('; ')`))
		if !strings.Contains(after, "Quota requests: 1,000 hard -> 100,000 hard") || !strings.Contains(after, "Quota exports: unlimited -> 50 soft") {
			t.Fatalf("confirmation shows %q", after)
		}
		if d, _ := b.Ents.GetTenant(b.Ctx, id); d.Plan != b.Free {
			t.Fatalf("the plan changed before the confirmation: %s", d.Plan)
		}
		screenshot(t, admin, "admin-confirm-plan-1280", 1280)
		screenshot(t, admin, "admin-confirm-plan-375", 375)
		step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button")))
		if p := run(t, admin, "plan", chromedp.AttributeValue(chromedp.CSS("#plan"), "data-plan")); p.Value != b.Pro {
			t.Fatalf("console shows plan %q after confirming", p.Value)
		}
	})

	t.Run("quota editor: add a row and save", func(t *testing.T) {
		step(t, admin, "plan page", chromedp.Navigate(base+"/admin/plans/"+b.Pro))
		rows := run(t, admin, "rows", chromedp.Evaluate[int64](`document.querySelectorAll('#quota-editor tr[data-row]').length`))
		step(t, admin, "more rows", chromedp.Click(chromedp.CSS("#more-rows")))
		more := run(t, admin, "rows", chromedp.Evaluate[int64](`document.querySelectorAll('#quota-editor tr[data-row]').length`))
		if more != rows+3 { // "More rows" adds three (web's moreRows)
			t.Fatalf("%d rows after More, want %d", more, rows+3)
		}
		last := "#q" + itoa(more-1)
		do(t, admin, "fill the new row", chromedp.SetValue(chromedp.CSS(last+"-meter"), "tokens"),
			chromedp.SetValue(chromedp.CSS(last+"-limit"), "77"), chromedp.SetValue(chromedp.CSS(last+"-mode"), "soft"))
		step(t, admin, "save", chromedp.Click(chromedp.CSS("#save-plan")))
		effect := run(t, admin, "effect", chromedp.Evaluate[string](`(() => { const r = document.querySelector('#effect tr[data-limit="Quota tokens"]'); return r ? r.dataset.before + ' -> ' + r.dataset.after : ''; })()`))
		if effect != "unlimited -> 77 soft" {
			t.Fatalf("the confirmation shows tokens %q", effect)
		}
		if n := run(t, admin, "tenants", chromedp.Evaluate[int64](`document.querySelectorAll('#confirm-tenants a').length`)); n != 1 {
			t.Fatalf("%d tenants listed, want the one on the plan", n)
		}
		step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button")))
		if p, _ := b.Cat.GetPlan(b.Ctx, b.Pro); p.Quotas["tokens"].Limit != 77 || p.Quotas["tokens"].Mode != "soft" || p.Quotas["requests"].Limit != 100000 {
			t.Fatalf("saved quotas %+v", p.Quotas)
		}
		screenshot(t, admin, "admin-plan-1280", 1280)
		screenshot(t, admin, "admin-plan-375", 375)
	})

	t.Run("bulk replay of failed events", func(t *testing.T) {
		tag := uniq("bb")
		b.event(t, "evt_x1"+tag, cus, id, "failed", 1)
		b.event(t, "evt_x2"+tag, cus, id, "failed", 2)
		b.event(t, "evt_x3"+tag, cus, id, "processed", 3)
		step(t, admin, "events", chromedp.Navigate(base+"/admin/events?status=failed&q="+cus))
		if name := text(t, admin, `tr[data-event="evt_x1`+tag+`"] td[data-tenant] a`); name != "Browser Co" {
			t.Fatalf("tenant column shows %q", name)
		}
		screenshot(t, admin, "admin-events-1280", 1280)
		screenshot(t, admin, "admin-events-375", 375)
		// One event's page: why it failed, its tenant, the payload.
		if _, err := b.Pool.Exec(b.Ctx, `UPDATE stripe_events SET last_error = $2, payload = $3 WHERE id = $1`, "evt_x1"+tag,
			"billing: price price_1QxTeam not in any plan: add it to a plan, then replay",
			`{"id": "evt_x1`+tag+`", "type": "customer.subscription.updated", "data": {"object": {"id": "sub_1QxBrowser", "customer": "`+cus+`", "status": "active", "items": {"data": [{"price": {"id": "price_1QxTeam"}, "quantity": 3}]}}}}`); err != nil {
			t.Fatal(err)
		}
		step(t, admin, "event", chromedp.Click(chromedp.CSS(`tr[data-event="evt_x1`+tag+`"] a[href^="/admin/events/"]`)))
		if h := text(t, admin, "h1"); h != "evt_x1"+tag {
			t.Fatalf("event page of %q", h)
		}
		if name := text(t, admin, "#event-tenant a"); name != "Browser Co" {
			t.Fatalf("event page tenant %q", name)
		}
		screenshot(t, admin, "admin-event-1280", 1280)
		screenshot(t, admin, "admin-event-375", 375)
		step(t, admin, "events", chromedp.Navigate(base+"/admin/events?status=failed&q="+cus))
		step(t, admin, "replay all", chromedp.Click(chromedp.CSS("#replay-all")))
		if n := run(t, admin, "listed", chromedp.Evaluate[int64](`document.querySelectorAll('#confirm-events li').length`)); n != 2 {
			t.Fatalf("the confirmation lists %d events, want 2", n)
		}
		step(t, admin, "confirm", chromedp.Click(chromedp.CSS("#confirm-button")))
		if msg := text(t, admin, ".notice"); msg != "2 failed events queued for replay." {
			t.Fatalf("notice %q", msg)
		}
		for _, e := range []string{"evt_x1", "evt_x2"} {
			if st := b.eventStatus(t, e+tag); st != "pending" {
				t.Fatalf("%s is %s", e, st)
			}
		}
	})
}
