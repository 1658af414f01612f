package web

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// The plan form's "Webhooks at" field reads percentages and units, and
// refuses anything else naming the row.
func TestPlanFormThresholdField(t *testing.T) {
	t.Parallel()
	got, err := parseThresholds(" 50%, 80 ,5000 units, 7u,100 % ")
	if err != nil {
		t.Fatal(err)
	}
	want := []keyspace.QuotaThreshold{{Percent: 50}, {Percent: 80}, {Units: 5000}, {Units: 7}, {Percent: 100}}
	var ts []keyspace.QuotaThreshold
	for _, n := range got {
		ts = append(ts, n.QuotaThreshold)
	}
	if !slices.Equal(ts, want) {
		t.Fatalf("parsed %v, want %v", ts, want)
	}
	if s := formatThresholds(want); s != "50%, 80%, 5000 units, 7 units, 100%" {
		t.Fatalf("formatted %q", s)
	}
	if got, err := parseThresholds("  "); err != nil || got != nil {
		t.Fatalf("empty = the defaults, got %v %v", got, err)
	}
	for _, bad := range []string{"80%,,100%", "eighty", "5000 dollars", "u", "1.5%"} {
		if _, err := parseThresholds(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// Thresholds are set from the console: shown on the plan's page, changed by
// the edit, back to the defaults when emptied, kept by a form without the
// field, and a bad one comes back next to its row. Editing keeps what the
// form does not show (the rollover and unit price set through the API).
func TestConsolePlanEditSetsWebhookThresholds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uniq("notify")
	b.plan(t, catalogue.PlanInput{Key: key, Name: "Notify", Quotas: map[string]*catalogue.QuotaInput{"requests": {
		Limit: ptr[int64](1000), Mode: "hard",
		Rollover:          &catalogue.RolloverInput{Max: ptr[int64](200), ExpiresAfterPeriods: ptr(2)},
		UnitAmountDecimal: "0.25", Currency: "usd",
		Notify: []catalogue.NotifyInput{{QuotaThreshold: keyspace.QuotaThreshold{Percent: 90}}}}}})
	br, tok := b.adminBrowser(t)
	wantIn(t, br.get("/admin/plans/"+key).body, `name="quotas[0].notify" value="90%"`)

	thresholds := func() []keyspace.QuotaThreshold {
		t.Helper()
		p, err := b.cat.GetPlan(b.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		q := p.Quotas["requests"]
		if q.Rollover == nil || q.Rollover.Max != 200 || q.Rollover.ExpiresAfterPeriods != 2 {
			t.Fatalf("the console edit lost the rollover: %+v", q.Rollover)
		}
		if q.UnitAmountDecimal != "0.25" || q.Currency != "usd" {
			t.Fatalf("the console edit lost the unit price: %q %q", q.UnitAmountDecimal, q.Currency)
		}
		return q.Notify
	}
	save := func(notify *string) {
		t.Helper()
		form := quotaRows(url.Values{"csrf": {tok}, "name": {"Notify"}, "confirm": {"1"}}, "requests 1000 hard")
		if notify != nil {
			form.Set("quotas[0].notify", *notify)
		}
		wantRedirect(t, br.post("/admin/plans/"+key, form), "/admin/plans/"+key+"?done=edited", "edit")
	}
	ptrS := func(s string) *string { return &s }

	save(ptrS("50%, 80%, 5000 units"))
	if got := thresholds(); !slices.Equal(got, []keyspace.QuotaThreshold{{Percent: 50}, {Percent: 80}, {Units: 5000}}) {
		t.Fatalf("saved thresholds %v", got)
	}
	wantIn(t, br.get("/admin/plans/"+key).body, `name="quotas[0].notify" value="50%, 80%, 5000 units"`)

	save(nil) // a form without the field (a script, an older page)
	if got := thresholds(); len(got) != 3 {
		t.Fatalf("a form without the field changed the thresholds to %v", got)
	}
	save(ptrS(""))
	if got := thresholds(); len(got) != 0 {
		t.Fatalf("an emptied field must give the defaults, got %v", got)
	}

	// Shape errors are the form's, ranges the service's: both name the row.
	for _, c := range []struct{ value, field string }{{"lots", "quotas[0].notify"}, {"150%", "quotas[0].notify[0]"}} {
		form := quotaRows(url.Values{"csrf": {tok}, "name": {"Notify"}, "confirm": {"1"}}, "requests 1000 hard")
		form.Set("quotas[0].notify", c.value)
		r := br.post("/admin/plans/"+key, form)
		wantStatus(t, r, http.StatusBadRequest, "bad thresholds "+c.value)
		wantIn(t, r.body, "<strong>"+c.field+"</strong>", `data-row-error="0"`, `name="quotas[0].notify" value="`+c.value+`"`)
	}
	if got := thresholds(); len(got) != 0 {
		t.Fatalf("a refused edit changed the thresholds to %v", got)
	}

	// A new plan takes them from the create form too.
	nk := uniq("notifynew")
	form := quotaRows(url.Values{"csrf": {tok}, "key": {nk}, "name": {"New"}}, "requests 10 hard")
	form.Set("quotas[0].notify", "25%")
	wantRedirect(t, br.post("/admin/plans", form), "/admin/plans/"+nk+"?done=created", "create")
	if p, err := b.cat.GetPlan(b.ctx, nk); err != nil || !slices.Equal(p.Quotas["requests"].Notify, []keyspace.QuotaThreshold{{Percent: 25}}) {
		t.Fatalf("created %+v %v", p.Quotas, err)
	}
}
