package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/stripemock"
)

// adminBrowser is a browser logged into the console, with its CSRF token.
func (b *bundle) adminBrowser(t *testing.T) (*browser, string) {
	t.Helper()
	br := b.browser(t)
	wantRedirect(t, br.loginAdmin(b.admin), "/admin/tenants", "admin login")
	page := br.get("/admin/tenants")
	wantStatus(t, page, http.StatusOK, "tenants")
	return br, csrf(t, page.body)
}

func TestConsoleTenantsSearchAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := uniq("zeta")
	for i := 0; i < tenantsPerPage+3; i++ {
		b.tenant(t, fmt.Sprintf("%s %02d", tag, i), b.free)
	}
	br, _ := b.adminBrowser(t)
	p1 := br.get("/admin/tenants?q=" + url.QueryEscape(strings.ToUpper(tag)))
	wantStatus(t, p1, http.StatusOK, "search")
	if n := strings.Count(p1.body, `<tr data-tenant="`); n != tenantsPerPage {
		t.Fatalf("page 1 lists %d tenants, want %d", n, tenantsPerPage)
	}
	if !strings.Contains(p1.body, "of 28 tenants") || !strings.Contains(p1.body, `rel="next"`) {
		t.Fatal("page 1 must count the matches and link to page 2")
	}
	p2 := br.get("/admin/tenants?page=2&q=" + url.QueryEscape(tag))
	if n := strings.Count(p2.body, `<tr data-tenant="`); n != 3 || !strings.Contains(p2.body, `rel="prev"`) {
		t.Fatalf("page 2 lists %d tenants, want 3 and a link back", n)
	}
	none := br.get("/admin/tenants?q=" + url.QueryEscape("%_"+tag))
	if strings.Contains(none.body, `<tr data-tenant="`) {
		t.Fatal("LIKE wildcards in the search must be literal")
	}
	wantStatus(t, br.get("/admin/tenants?page=-4&q=x"), http.StatusOK, "a silly page number")
}

func TestConsoleTenantPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Initech", b.free)
	br, tok := b.adminBrowser(t)
	page := br.get("/admin/tenants/" + tn.ID)
	wantStatus(t, page, http.StatusOK, "tenant page")
	for _, want := range []string{"Initech", `data-plan="` + b.free + `"`, `id="ent-version"`, "No Stripe subscription", `data-meter="requests"`} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("tenant page lacks %q", want)
		}
	}
	wantStatus(t, br.get("/admin/tenants/00000000-0000-0000-0000-000000000000"), http.StatusNotFound, "unknown tenant")
	wantStatus(t, br.get("/admin/tenants/nope"), http.StatusNotFound, "malformed id")
	wantStatus(t, br.get("/admin/nothing-here"), http.StatusNotFound, "unknown console page")

	// Plan change, then an unknown plan (a 4xx page, nothing changed).
	wantRedirect(t, br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"csrf": {tok}, "plan": {b.pro}, "confirm": {"1"}}), "/admin/tenants/"+tn.ID+"?done=plan", "change plan")
	if d, _ := b.ents.GetTenant(b.ctx, tn.ID); d.Plan != b.pro {
		t.Fatalf("plan is %s", d.Plan)
	}
	if r := br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"csrf": {tok}, "plan": {"no-such-plan"}, "confirm": {"1"}}); r.status < 400 || r.status >= 500 {
		t.Fatalf("unknown plan: %d", r.status)
	}

	// Keys: issued (shown once), revoked.
	r := br.post("/admin/tenants/"+tn.ID+"/keys", url.Values{"csrf": {tok}, "name": {"ops"}})
	wantStatus(t, r, http.StatusCreated, "issue key")
	if !strings.Contains(r.body, `id="newkey"`) {
		t.Fatal("issued key not shown")
	}
	keys, _ := b.keys.ListKeys(b.ctx, tn.ID)
	if len(keys) != 1 {
		t.Fatalf("%d keys", len(keys))
	}
	wantRedirect(t, br.post("/admin/tenants/"+tn.ID+"/keys/"+keys[0].ID+"/revoke", url.Values{"csrf": {tok}, "confirm": {"1"}}),
		"/admin/tenants/"+tn.ID+"?done=revoked#keys", "revoke")
	other := b.tenant(t, "Other Co", b.free)
	ok := b.key(t, other.ID)
	wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/keys/"+ok.ID+"/revoke", url.Values{"csrf": {tok}}), http.StatusNotFound, "key of another tenant under this tenant")

	// Dashboard link from the console: it logs the tenant in.
	r = br.post("/admin/tenants/"+tn.ID+"/dashboard-link", url.Values{"csrf": {tok}})
	wantStatus(t, r, http.StatusCreated, "mint link")
	i := strings.Index(r.body, "/dashboard/login?token=")
	if i < 0 {
		t.Fatal("no link on the page")
	}
	link := r.body[i:]
	link = link[:strings.IndexByte(link, '"')]
	wantRedirect(t, b.browser(t).loginLink(strings.ReplaceAll(link, "&amp;", "&")), "/dashboard", "login with the console's link")

	// Without Stripe the tenant has no customer: no button, and a resync
	// posted anyway is refused with a reason, never a 500.
	if strings.Contains(page.body, `id="resync"`) {
		t.Fatal("resync offered for a tenant without a Stripe customer")
	}
	if r := br.post("/admin/tenants/"+tn.ID+"/resync", url.Values{"csrf": {tok}}); r.status < 400 || r.status == http.StatusInternalServerError {
		t.Fatalf("resync without Stripe: %d", r.status)
	}

	// Overrides: a bad one comes back with its reasons, a good one applies.
	r = br.post("/admin/tenants/"+tn.ID+"/overrides", url.Values{"csrf": {tok}, "meter": {"requests"}, "extra": {"ten"}})
	wantStatus(t, r, http.StatusBadRequest, "bad override")
	if !strings.Contains(r.body, "must be a whole number") {
		t.Fatal("the override form does not say what was wrong")
	}
	wantRedirect(t, br.post("/admin/tenants/"+tn.ID+"/overrides", url.Values{"csrf": {tok}, "meter": {"requests"}, "extra": {"500"}, "reason": {"launch"}, "expires_days": {"7"}}),
		"/admin/tenants/"+tn.ID+"?done=override#overrides", "override")
	snap, _ := b.ents.SnapshotFromPostgres(b.ctx, tn.ID)
	if q := snap.Quotas["requests"]; q.Limit != 100500 {
		t.Fatalf("requests limit %d after +500 on pro", q.Limit)
	}
	ovs, _ := b.ents.ListOverrides(b.ctx, tn.ID)
	if len(ovs) != 1 || ovs[0].ExpiresAt == nil {
		t.Fatalf("overrides %+v", ovs)
	}
	wantRedirect(t, br.post("/admin/tenants/"+tn.ID+"/overrides/"+ovs[0].ID+"/delete", url.Values{"csrf": {tok}, "confirm": {"1"}}),
		"/admin/tenants/"+tn.ID+"?done=deleted#overrides", "delete override")
	wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/overrides/bad/delete", url.Values{"csrf": {tok}}), http.StatusNotFound, "malformed override id")
}

func TestConsolePlans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uniq("gold")
	b.tenant(t, "On Pro 1", b.pro)
	b.tenant(t, "On Pro 2", b.pro)
	br, tok := b.adminBrowser(t)

	wantStatus(t, br.get("/admin/plans"), http.StatusOK, "plans")
	form := url.Values{"csrf": {tok}, "key": {key}, "name": {"Gold"}, "rate_per_second": {"50"}, "rate_burst": {"100"},
		"concurrency": {"5"}, "features": {"sso, exports"}}
	quotaRows(form, "requests 5000 hard", "exports 10 soft")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+key+"?done=created", "create plan")
	p, err := b.cat.GetPlan(b.ctx, key)
	if err != nil || p.Quotas["exports"].Mode != "soft" || p.Rate == nil || p.Rate.Burst != 100 || len(p.Features) != 2 {
		t.Fatalf("created plan %+v, %v", p, err)
	}
	// Duplicate key: 409 with the form filled in again.
	r := br.post("/admin/plans", form)
	wantStatus(t, r, http.StatusConflict, "duplicate plan")
	if !strings.Contains(r.body, `value="`+key+`"`) {
		t.Fatal("the refused form must come back filled in")
	}
	bad := quotaRows(url.Values{"csrf": {tok}, "key": {uniq("x")}}, "requests lots hard")
	r = br.post("/admin/plans", bad)
	wantStatus(t, r, http.StatusBadRequest, "bad quota row")
	wantIn(t, r.body, "<strong>quotas[0].limit</strong>", `data-row-error="0"`)

	// Editing pro says how many tenants it affects, and reaches them.
	page := br.get("/admin/plans/" + b.pro)
	wantStatus(t, page, http.StatusOK, "plan page")
	if !strings.Contains(page.body, "<strong>2</strong> tenants") {
		t.Fatal("the plan page must say that the edit affects 2 tenants")
	}
	edit := quotaRows(url.Values{"csrf": {tok}, "name": {"Pro"}, "confirm": {"1"}}, "requests 200000 hard")
	wantRedirect(t, br.post("/admin/plans/"+b.pro, edit), "/admin/plans/"+b.pro+"?done=edited", "edit plan")
	p, _ = b.cat.GetPlan(b.ctx, b.pro)
	if _, ok := p.Quotas["exports"]; ok || p.Quotas["requests"].Limit != 200000 {
		t.Fatalf("edited plan quotas %+v", p.Quotas)
	}
	wantStatus(t, br.get("/admin/plans/no-such-plan"), http.StatusNotFound, "unknown plan")
}

func TestConsoleEventsAndDrift(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Hooli", b.free)
	for i, st := range []string{"failed", "processed", "pending"} {
		if _, err := b.pool.Exec(b.ctx, `
			INSERT INTO stripe_events (id, type, stripe_customer_id, tenant_id, event_created, payload, status, attempts, last_error)
			VALUES ($1, 'customer.subscription.updated', 'cus_hooli', $2, now(), $3, $4, $5, $6)`,
			fmt.Sprintf("evt_web_%d_%s", i, tn.ID[:8]), tn.ID, `{"id": "evt", "data": {"object": {"note": "<script>x</script>"}}}`, st, i, map[bool]any{true: "boom", false: nil}[st == "failed"]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO drift_repairs (tenant_id, subscription_id, field, ours, stripe) VALUES ($1, 'sub_1', 'status', 'active', 'past_due')`, tn.ID); err != nil {
		t.Fatal(err)
	}
	br, tok := b.adminBrowser(t)
	failed := br.get("/admin/events?status=failed")
	wantStatus(t, failed, http.StatusOK, "failed events")
	if !strings.Contains(failed.body, "evt_web_0_") || strings.Contains(failed.body, "evt_web_1_") {
		t.Fatal("the status filter does not filter")
	}
	wantStatus(t, br.get("/admin/events?status=weird"), http.StatusBadRequest, "unknown status")
	id := "evt_web_0_" + tn.ID[:8]
	ev := br.get("/admin/events/" + id)
	wantStatus(t, ev, http.StatusOK, "event page")
	if !strings.Contains(ev.body, "&lt;script&gt;") || strings.Contains(ev.body, "<script>x") {
		t.Fatal("the payload must be shown, escaped")
	}
	wantStatus(t, br.get("/admin/events/evt_nope"), http.StatusNotFound, "unknown event")
	wantRedirect(t, br.post("/admin/events/"+id+"/replay", url.Values{"csrf": {tok}}), "/admin/events/"+id+"?done=replayed", "replay")
	var st string
	_ = b.pool.QueryRow(b.ctx, `SELECT status FROM stripe_events WHERE id = $1`, id).Scan(&st)
	if st != "pending" {
		t.Fatalf("replayed event is %s, want pending (queued)", st)
	}
	wantStatus(t, br.post("/admin/events/evt_nope/replay", url.Values{"csrf": {tok}}), http.StatusNotFound, "replay unknown")

	drift := br.get("/admin/drift")
	if !strings.Contains(drift.body, "past_due") || !strings.Contains(drift.body, "Hooli") {
		t.Fatal("drift page does not list the repair")
	}
	tp := br.get("/admin/tenants/" + tn.ID)
	if !strings.Contains(tp.body, id) || !strings.Contains(tp.body, "Drift repaired") {
		t.Fatal("the tenant page must list its Stripe events and drift")
	}
}

func TestDashboardShowsStatusAndUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Pied Piper", b.pro)
	if _, err := b.pool.Exec(b.ctx, `
		INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end, past_due_since, grace_ends_at)
		VALUES ($1, $2, 'cus_pp', 'past_due', now() - interval '3 days', now() + interval '27 days', now() - interval '1 day', now() + interval '2 days')`,
		"sub_"+tn.ID[:8], tn.ID); err != nil {
		t.Fatal(err)
	}
	k := b.key(t, tn.ID)
	br := b.browser(t)
	br.loginKey(k.Key)
	page := br.get("/dashboard")
	wantStatus(t, page, http.StatusOK, "dashboard")
	for _, want := range []string{"grace period", "falls back to " + b.free, "resets in", "Change plan", "hard limit", "soft limit"} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("dashboard lacks %q", want)
		}
	}
	if strings.Contains(page.body, "<script") {
		t.Fatal("the dashboard must not need scripts")
	}
}

func TestPlanFormParsing(t *testing.T) {
	t.Parallel()
	f := planForm{Key: "k", Features: " a, ,b ", Concurrency: "3", Rows: []quotaRow{
		{Meter: "requests", Limit: "10", Mode: "hard"}, {Mode: "hard"}, {Meter: "exports", Limit: "5", Mode: "soft", PerSeat: true},
		{Meter: "gone", Limit: "1", Mode: "hard", Remove: true}}}
	in, err := f.input()
	if err != nil || len(in.Quotas) != 2 || *in.Quotas["exports"].Limit != 5 || in.Quotas["exports"].Mode != "soft" || !in.Quotas["exports"].PerSeat ||
		len(in.Features) != 2 || *in.Concurrency != 3 {
		t.Fatalf("%+v %v", in, err)
	}
	// Each bad row is named by its row and field.
	for _, c := range []struct {
		row   quotaRow
		field string
	}{
		{quotaRow{Meter: "requests", Mode: "hard"}, "quotas[1].limit"},
		{quotaRow{Meter: "requests", Limit: "x", Mode: "hard"}, "quotas[1].limit"},
		{quotaRow{Meter: "requests", Limit: "-1", Mode: "hard"}, "quotas[1].limit"},
		{quotaRow{Meter: "requests", Limit: "1.5", Mode: "hard"}, "quotas[1].limit"},
		{quotaRow{Meter: "Bad Meter", Limit: "1", Mode: "hard"}, "quotas[1].meter"},
		{quotaRow{Limit: "1", Mode: "hard"}, "quotas[1].meter"},
		{quotaRow{Meter: "requests", Limit: "1", Mode: "strict"}, "quotas[1].mode"},
		{quotaRow{Meter: "requests", Limit: "1"}, "quotas[1].mode"},
	} {
		f := planForm{Rows: []quotaRow{{Meter: "ok", Limit: "1", Mode: "hard"}, c.row}}
		if c.row.Meter == "requests" {
			f.Rows[0].Meter = "other"
		}
		_, err := f.input()
		e, ok := apperr.As(err)
		if !ok || len(e.Fields) != 1 || e.Fields[0].Field != c.field || !strings.HasPrefix(e.Fields[0].Message, "row 2: ") || len(f.Rows[1].Errors) != 1 {
			t.Errorf("%+v: %v, want one error on %s", c.row, err, c.field)
		}
	}
	dup := planForm{Rows: []quotaRow{{Meter: "requests", Limit: "1", Mode: "hard"}, {Meter: "requests", Limit: "2", Mode: "soft"}}}
	if _, err := dup.input(); err == nil || !strings.Contains(err.Error(), "already in row 1") {
		t.Errorf("duplicate meter: %v", err)
	}
	for _, f := range []planForm{{RatePerSecond: "fast"}, {RateBurst: "1.5"}, {Concurrency: "many"}} {
		if _, err := f.input(); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
	if in, _ := (&planForm{}).input(); in.Rate != nil || in.Concurrency != nil {
		t.Fatal("empty rate and concurrency mean unlimited")
	}
}

func TestConsolePlanChangeThroughStripe(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{stripeBase: stripemock.Start(t)})
	small, big, local := uniq("small"), uniq("big"), uniq("local")
	b.plan(t, catalogue.PlanInput{Key: small, StripePriceID: "price_" + small, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](10)}}})
	b.plan(t, catalogue.PlanInput{Key: big, StripePriceID: "price_" + big, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}}})
	b.plan(t, catalogue.PlanInput{Key: local, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](99)}}})
	cus := "cus_" + uniq("web")
	tn, err := b.ents.CreateTenant(b.ctx, entitlements.TenantInput{Name: "Stripe Co", Plan: small, StripeCustomerID: cus})
	if err != nil {
		t.Fatal(err)
	}
	sub := "sub_" + uniq("web")
	if _, err := b.pool.Exec(b.ctx, `
		INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status, current_period_start, current_period_end)
		VALUES ($1, $2, $3, $4, 'si_123', 'active', now() - interval '1 day', now() + interval '29 days')`,
		sub, tn.ID, cus, "price_"+small); err != nil {
		t.Fatal(err)
	}
	br, tok := b.adminBrowser(t)
	page := br.get("/admin/tenants/" + tn.ID)
	if !strings.Contains(page.body, "subscription's price is swapped") || !strings.Contains(page.body, sub) {
		t.Fatal("the tenant page must show the subscription and say the change goes through Stripe")
	}
	// Through Stripe (stripe-mock accepts the price swap), then applied here.
	wantRedirect(t, br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"csrf": {tok}, "plan": {big}, "confirm": {"1"}}), "/admin/tenants/"+tn.ID+"?done=plan", "change through Stripe")
	var price string
	_ = b.pool.QueryRow(b.ctx, `SELECT stripe_price_id FROM subscriptions WHERE id = $1`, sub).Scan(&price)
	if d, _ := b.ents.GetTenant(b.ctx, tn.ID); d.Plan != big || price != "price_"+big {
		t.Fatalf("plan %s, subscription price %s", d.Plan, price)
	}
	// Resync reads the customer from Stripe (stripe-mock answers canned
	// objects) and says what it repaired.
	r := br.post("/admin/tenants/"+tn.ID+"/resync", url.Values{"csrf": {tok}})
	wantStatus(t, r, http.StatusOK, "resync")
	if !strings.Contains(r.body, "Resynced with Stripe") {
		t.Fatal("the resync result is not shown")
	}
	wantStatus(t, br.post("/admin/tenants/"+tn.ID+"/resync", url.Values{}), http.StatusForbidden, "resync without csrf")

	// A plan Stripe does not know cannot be given to a subscribed tenant:
	// the page says why and nothing changes.
	r = br.post("/admin/tenants/"+tn.ID+"/plan", url.Values{"csrf": {tok}, "plan": {local}, "confirm": {"1"}})
	wantStatus(t, r, http.StatusBadRequest, "plan without a Stripe price")
	if !strings.Contains(r.body, "stripe_price_id") {
		t.Fatal("the refusal does not say why")
	}
	if d, _ := b.ents.GetTenant(b.ctx, tn.ID); d.Plan != big {
		t.Fatalf("plan changed to %s", d.Plan)
	}
}
