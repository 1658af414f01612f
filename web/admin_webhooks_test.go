package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/notify"
)

// The console's webhook pages: an endpoint added shows its secret once
// (no-store, never on the list again); a private address is refused with
// the field; edit, disable/enable, rotate (a new secret shown once),
// deliveries listed with status, attempts and answer, retry now and
// replay, delete; every change in the audit trail with the endpoint as
// target and without the secret.
func TestConsoleWebhookPages(t *testing.T) {
	b := setup(t)
	svc, err := notify.NewService(b.pool, nil, notify.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	b.web.Webhooks = svc
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `TRUNCATE webhook_endpoints, webhook_events CASCADE`); err != nil {
		t.Fatal(err)
	}
	br := b.browser(t)
	br.loginAdmin(b.admin)
	page := br.get("/admin/webhooks")
	wantStatus(t, page, http.StatusOK, "webhooks page")
	tok := csrf(t, page.body)

	bad := br.post("/admin/webhooks", url.Values{"csrf": {tok}, "url": {"https://127.0.0.1/hook"}})
	wantStatus(t, bad, http.StatusUnprocessableEntity, "a private address")
	if !strings.Contains(bad.body, "<strong>url</strong>") || !strings.Contains(bad.body, "127.0.0.1") {
		t.Errorf("the refusal does not name the field:\n%.3000s", bad.body)
	}
	bad = br.post("/admin/webhooks", url.Values{"csrf": {tok}, "url": {"https://203.0.113.9/"}, "events": {"quota.nope"}})
	wantStatus(t, bad, http.StatusBadRequest, "an unknown event type")
	if !strings.Contains(bad.body, "events[0]") {
		t.Errorf("no events[0] error:\n%.3000s", bad.body)
	}

	made := br.post("/admin/webhooks", url.Values{"csrf": {tok}, "url": {"https://203.0.113.9/hook"}, "events": {"quota.threshold, quota.exhausted"}, "description": {"ops"}})
	wantStatus(t, made, http.StatusOK, "create")
	secret := regexp.MustCompile(`id="secret-value">(whsec_[^<]+)<`).FindStringSubmatch(made.body)
	if secret == nil || made.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: no secret shown (or cacheable: %q):\n%.3000s", made.header.Get("Cache-Control"), made.body)
	}
	eps, err := svc.List(ctx)
	if err != nil || len(eps) != 1 {
		t.Fatalf("endpoints %+v %v", eps, err)
	}
	id := eps[0].ID
	list := br.get("/admin/webhooks")
	if strings.Contains(list.body, secret[1]) || !strings.Contains(list.body, "https://203.0.113.9/hook") || !strings.Contains(list.body, "quota.exhausted") {
		t.Errorf("list shows the secret or misses the endpoint:\n%.3000s", list.body)
	}

	wantRedirect(t, br.post("/admin/webhooks/"+id, url.Values{"csrf": {tok}, "url": {"https://203.0.113.10/hook"}, "events": {""}}),
		"/admin/webhooks/"+id+"?done=webhook", "edit")
	wantRedirect(t, br.post("/admin/webhooks/"+id, url.Values{"csrf": {tok}, "enabled": {"off"}}), "/admin/webhooks/"+id+"?done=webhook", "disable")
	detail := br.get("/admin/webhooks/" + id)
	if !strings.Contains(detail.body, "https://203.0.113.10/hook") || !strings.Contains(detail.body, "<strong>Disabled</strong>") {
		t.Errorf("detail after edit and disable:\n%.3000s", detail.body)
	}
	wantRedirect(t, br.post("/admin/webhooks/"+id, url.Values{"csrf": {tok}, "enabled": {"on"}}), "/admin/webhooks/"+id+"?done=webhook", "enable")
	rot := br.post("/admin/webhooks/"+id+"/rotate-secret", url.Values{"csrf": {tok}})
	wantStatus(t, rot, http.StatusOK, "rotate")
	rsecret := regexp.MustCompile(`id="secret-value">(whsec_[^<]+)<`).FindStringSubmatch(rot.body)
	if rsecret == nil || rsecret[1] == secret[1] {
		t.Fatalf("rotate: no new secret shown:\n%.3000s", rot.body)
	}

	// A delivery: failed once with a 500 and its answer.
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := svc.Emit(ctx, tx, notify.Event{Type: notify.TypeSubscriptionStatus, Data: map[string]any{"status": "active"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'failed', attempts = 9, last_code = 500, last_body = 'upstream <b>down</b>'`); err != nil {
		t.Fatal(err)
	}
	ds, _ := svc.Deliveries(ctx, id, 0, 0)
	if len(ds) != 1 {
		t.Fatalf("deliveries %+v", ds)
	}
	detail = br.get("/admin/webhooks/" + id)
	for _, want := range []string{ds[0].EventID, "subscription.status", "failed", ">9<", "500", "upstream &lt;b&gt;down&lt;/b&gt;", "Retry now", "Replay"} {
		if !strings.Contains(detail.body, want) {
			t.Errorf("deliveries table misses %q:\n%.4000s", want, detail.body)
		}
	}
	did := ds[0].ID
	wantRedirect(t, br.post("/admin/webhooks/"+id+"/deliveries/"+itoa64(did)+"/retry", url.Values{"csrf": {tok}}), "/admin/webhooks/"+id+"?done=retry", "retry now")
	if d, _ := svc.Deliveries(ctx, id, 0, 0); d[0].Status != "pending" {
		t.Errorf("after retry now: %s, want pending", d[0].Status)
	}
	wantRedirect(t, br.post("/admin/webhooks/"+id+"/events/"+ds[0].EventID+"/replay", url.Values{"csrf": {tok}}), "/admin/webhooks/"+id+"?done=replay", "replay")
	wantRedirect(t, br.post("/admin/webhooks/"+id+"/delete", url.Values{"csrf": {tok}}), "/admin/webhooks?done=unwebhook", "delete")
	wantStatus(t, br.get("/admin/webhooks/"+id), http.StatusNotFound, "deleted endpoint")

	entries, err := b.trail.List(ctx, audit.Filter{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range entries {
		if e.Target == id {
			got[e.Action]++
		}
		if strings.Contains(string(e.Before)+string(e.After), secret[1][6:]) || strings.Contains(string(e.Before)+string(e.After), rsecret[1][6:]) {
			t.Errorf("a secret in the audit trail: %+v", e)
		}
	}
	for _, a := range []string{"webhook_endpoint.create", "webhook_endpoint.edit", "webhook_endpoint.rotate_secret", "webhook_delivery.retry", "webhook_event.replay", "webhook_endpoint.delete"} {
		if got[a] == 0 {
			t.Errorf("no audit entry %s for the endpoint (have %v)", a, got)
		}
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// Editing a plan on the console keeps its quotas' webhook thresholds
// ("notify"), which the form does not show.
func TestConsolePlanEditKeepsNotify(t *testing.T) {
	b := setup(t)
	br, tok := b.adminBrowser(t)
	key := uniq("notify")
	limit := int64(10)
	var notify []catalogue.NotifyInput
	if err := json.Unmarshal([]byte(`[50, {"units": 9}]`), &notify); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cat.CreatePlan(b.ctx, catalogue.PlanInput{Key: key, Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: &limit, Mode: "hard", Notify: notify}}}); err != nil {
		t.Fatal(err)
	}
	edit := quotaRows(url.Values{"csrf": {tok}, "name": {"Notify"}, "confirm": {"1"}}, "requests 20 hard")
	wantRedirect(t, br.post("/admin/plans/"+key, edit), "/admin/plans/"+key+"?done=edited", "edit plan")
	p, err := b.cat.GetPlan(b.ctx, key)
	if err != nil || p.Quotas["requests"].Limit != 20 || len(p.Quotas["requests"].Notify) != 2 {
		t.Fatalf("edited plan %+v, %v: want the limit changed and both thresholds kept", p.Quotas, err)
	}
}
