package web

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/audit"
)

// event stores a Stripe event as the webhook intake would, received
// minutesAgo minutes ago.
func (b *bundle) event(t testing.TB, id, customer, tenantID, status string, minutesAgo int) {
	t.Helper()
	var tid any
	if tenantID != "" {
		tid = tenantID
	}
	var lastErr any
	if status == "failed" {
		lastErr = "boom"
	}
	if _, err := b.pool.Exec(b.ctx, `
		INSERT INTO stripe_events (id, type, stripe_customer_id, tenant_id, event_created, received_at, payload, status, attempts, last_error)
		VALUES ($1, 'customer.subscription.updated', $2, $3, now(), now() - make_interval(mins => $4), '{}', $5, 1, $6)`,
		id, customer, tid, minutesAgo, status, lastErr); err != nil {
		t.Fatal(err)
	}
}

var eventRowRe = regexp.MustCompile(`<tr data-event="([^"]+)" data-status="([^"]+)">`)

// listed is the events of a list page, in order, as "id:status".
func listed(body string) []string {
	var out []string
	for _, m := range eventRowRe.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1]+":"+m[2])
	}
	return out
}

func (b *bundle) eventStatus(t testing.TB, id string) string {
	t.Helper()
	var st string
	if err := b.pool.QueryRow(b.ctx, `SELECT status FROM stripe_events WHERE id = $1`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestConsoleEventsListNamesTenantsSearchesAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.tenant(t, "Alpha Events", b.free)
	tag := uniq("ev")
	cusA, cusX, cusP := "cus_a"+tag, "cus_x"+tag, "cus_p"+tag
	b.event(t, "evt_f1"+tag, cusA, a.ID, "failed", 1)
	b.event(t, "evt_i1"+tag, cusA, a.ID, "ignored", 2)
	b.event(t, "evt_p1"+tag, cusA, a.ID, "processed", 3)
	b.event(t, "evt_n1"+tag, cusX, "", "pending", 4)
	br, _ := b.adminBrowser(t)

	r := br.get("/admin/events?q=" + cusA)
	wantStatus(t, r, http.StatusOK, "search by customer")
	if got := strings.Join(listed(r.body), ","); got != "evt_f1"+tag+":failed,evt_i1"+tag+":ignored,evt_p1"+tag+":processed" {
		t.Fatalf("customer search lists %s", got)
	}
	wantIn(t, r.body, `<a href="/admin/tenants/`+a.ID+`">Alpha Events</a>`, `id="replay-all">Replay all 1 failed`)
	if got := listed(br.get("/admin/events?q=evt_i1" + tag).body); len(got) != 1 || got[0] != "evt_i1"+tag+":ignored" {
		t.Fatalf("event id search lists %v", got)
	}
	if got := listed(br.get("/admin/events?status=ignored&q=" + cusA).body); len(got) != 1 {
		t.Fatalf("ignored filter lists %v", got)
	}
	if got := listed(br.get("/admin/events?status=all&q=" + cusX).body); len(got) != 1 || got[0] != "evt_n1"+tag+":pending" {
		t.Fatalf("all + customer lists %v", got)
	}
	// Bad input: 400 naming the parameter.
	for q, field := range map[string]string{"q=acme": "q", "q=evt_1%20evt_2": "q", "status=weird": "status", "cursor=%21%21": "cursor"} {
		r := br.get("/admin/events?" + q)
		wantStatus(t, r, http.StatusBadRequest, q)
		wantIn(t, r.body, "<strong>"+field+"</strong>")
	}

	// The event page names the tenant, linked.
	ev := br.get("/admin/events/evt_f1" + tag)
	wantIn(t, ev.body, `<dd id="event-tenant"><a href="/admin/tenants/`+a.ID+`">Alpha Events</a>`)

	// Pages keep the filter: 55 processed events of one customer.
	for i := range 55 {
		b.event(t, fmt.Sprintf("evt_pg%02d%s", i, tag), cusP, "", "processed", 10+i)
	}
	p1 := br.get("/admin/events?status=processed&q=" + cusP)
	rows := listed(p1.body)
	if len(rows) != eventsPerPage || rows[0] != "evt_pg00"+tag+":processed" {
		t.Fatalf("page 1: %d rows from %v", len(rows), rows[:1])
	}
	m := regexp.MustCompile(`href="(/admin/events\?[^"]+)" rel="next"`).FindStringSubmatch(p1.body)
	if m == nil {
		t.Fatal("page 1 has no next link")
	}
	next := strings.ReplaceAll(m[1], "&amp;", "&")
	u, _ := url.Parse(next)
	if u.Query().Get("status") != "processed" || u.Query().Get("q") != cusP || u.Query().Get("cursor") == "" {
		t.Fatalf("the next link drops the filter: %s", next)
	}
	p2 := br.get(next)
	if rows := listed(p2.body); len(rows) != 5 || rows[4] != "evt_pg54"+tag+":processed" || strings.Contains(p2.body, `rel="next"`) {
		t.Fatalf("page 2: %v", rows)
	}
	wantIn(t, p2.body, `rel="first"`)
}

// Bulk replay: every failed event of the search, or the ticked ones, after
// one confirmation naming them; each replay is audited.
func TestConsoleBulkReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.tenant(t, "Replay Co", b.free)
	tag := uniq("rp")
	cusA, cusB := "cus_a"+tag, "cus_b"+tag
	for i := range 3 {
		b.event(t, fmt.Sprintf("evt_a%d%s", i, tag), cusA, a.ID, "failed", i+1)
	}
	b.event(t, "evt_ok"+tag, cusA, a.ID, "processed", 5)
	b.event(t, "evt_b"+tag, cusB, "", "failed", 6)
	br, tok := b.adminBrowser(t)

	form := url.Values{"csrf": {tok}, "scope": {"all"}, "status": {"failed"}, "q": {cusA}}
	r := br.post("/admin/events/replay", form)
	wantStatus(t, r, http.StatusOK, "bulk replay without confirmation")
	wantIn(t, r.body, "Replay 3 failed events?", `name="id" value="evt_a0`+tag+`"`, `name="id" value="evt_a2`+tag+`"`, `name="scope" value="selected"`)
	if strings.Contains(r.body, "evt_b"+tag) {
		t.Fatal("another customer's failed event is in the confirmation")
	}
	if st := b.eventStatus(t, "evt_a0"+tag); st != "failed" {
		t.Fatalf("replayed without confirmation: %s", st)
	}
	// The confirm form: its hidden fields posted back.
	confirm := url.Values{"csrf": {tok}, "confirm": {"1"}}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`).FindAllStringSubmatch(r.body, -1) {
		if m[1] != "csrf" && m[1] != "confirm" {
			confirm.Add(m[1], m[2])
		}
	}
	wantRedirect(t, br.post("/admin/events/replay", confirm), "/admin/events?"+url.Values{"q": {cusA}, "queued": {"3"}, "status": {"failed"}}.Encode(), "confirmed")
	for i := range 3 {
		if st := b.eventStatus(t, fmt.Sprintf("evt_a%d%s", i, tag)); st != "pending" {
			t.Fatalf("event %d is %s after the replay, want pending (queued)", i, st)
		}
	}
	if st := b.eventStatus(t, "evt_b"+tag); st != "failed" {
		t.Fatalf("the other customer's event is %s", st)
	}
	es, _ := b.trail.List(b.ctx, audit.Filter{TenantID: a.ID})
	if len(es) != 3 || es[0].Action != "stripe_event.replay" || !strings.Contains(string(es[0].Before), `"status":"failed"`) || !strings.Contains(string(es[0].After), `"status":"pending"`) {
		t.Fatalf("audit: %+v", es)
	}
	wantIn(t, br.get("/admin/events?status=failed&queued=3&q="+cusA).body, "3 failed events queued for replay.")

	// Ticked: only the failed ones are replayed, the rest are counted.
	sel := url.Values{"csrf": {tok}, "scope": {"selected"}, "id": {"evt_b" + tag, "evt_ok" + tag}}
	r = br.post("/admin/events/replay", sel)
	wantIn(t, r.body, "Replay 1 failed event?", `name="id" value="evt_b`+tag+`"`)
	if strings.Contains(r.body, `name="id" value="evt_ok`) {
		t.Fatal("a processed event is in the confirmation")
	}
	sel.Set("confirm", "1")
	wantRedirect(t, br.post("/admin/events/replay", sel), "/admin/events?"+url.Values{"queued": {"1"}, "skipped": {"1"}, "status": {"failed"}}.Encode(), "selected")
	if st := b.eventStatus(t, "evt_ok"+tag); st != "processed" {
		t.Fatalf("the processed event became %s", st)
	}

	// Bad input names the field; nothing is queued.
	for _, c := range []struct {
		form  url.Values
		field string
	}{
		{url.Values{"csrf": {tok}}, "scope"},
		{url.Values{"csrf": {tok}, "scope": {"everything"}}, "scope"},
		{url.Values{"csrf": {tok}, "scope": {"selected"}}, "id"},
		{url.Values{"csrf": {tok}, "scope": {"all"}, "q": {cusA}}, "id"}, // none failed any more
		{url.Values{"csrf": {tok}, "scope": {"all"}, "q": {"nonsense"}}, "q"},
		{url.Values{"csrf": {tok}, "scope": {"selected"}, "id": {strings.Repeat("x", 300)}}, "id"},
	} {
		r := br.post("/admin/events/replay", c.form)
		wantStatus(t, r, http.StatusBadRequest, c.form.Encode())
		wantIn(t, r.body, "<strong>"+c.field+"</strong>")
	}
	wantStatus(t, br.post("/admin/events/replay", url.Values{"scope": {"all"}, "confirm": {"1"}}), http.StatusForbidden, "without csrf")
}
