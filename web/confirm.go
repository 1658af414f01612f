package web

// Confirmation steps. A console action that takes something away or
// reaches many tenants (revoke a key, remove an override, change a tenant's
// plan, edit a plan, replay events in bulk) is a POST that first renders a
// page showing its effect, with a form that posts the same fields again plus
// confirm=1. Only that second POST acts; without the field nothing happens,
// so a stray click, a replayed form or a crafted request cannot act unseen.
// No JavaScript is involved: the confirm form is a plain form with the CSRF
// token.

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/numfmt"
	"github.com/tollgatehq/tollgate/limiter"
)

// confirmField is the form field whose value "1" confirms an action.
const confirmField = "confirm"

// confirmed reports whether the POST is the confirm form's.
func confirmed(c echo.Context) bool { return c.FormValue(confirmField) == "1" }

// confirmPage is what the confirmation template shows.
type confirmPage struct {
	Heading string
	Lead    string // one sentence: what will happen
	Warning string // what cannot be undone, or who is hit
	Action  string // where the confirm form posts
	Hidden  []hiddenField
	Button  string
	Cancel  string // back to where the admin came from
	Limits  []limitChange
	Facts   []fact
	Tenants []tenantLink // tenants affected (the first ones)
	More    int          // affected tenants not listed
	Events  []string     // event ids (bulk replay; the first ones)
}

type hiddenField struct{ Name, Value string }

type fact struct{ Label, Value string }

type tenantLink struct{ ID, Name string }

// limitChange is one limit before and after.
type limitChange struct {
	Name    string
	Before  string
	After   string
	Changed bool
	// Used is the usage of the period so far (quotas of a tenant only).
	Used *int64
	// Over: the new limit is hard and usage already reaches it, so the
	// tenant is refused on this meter from the moment of the change.
	Over bool
}

// renderConfirm shows the confirmation page. The POST that shows it changes
// nothing, so it is not recorded in the audit trail.
func (w *Web) renderConfirm(c echo.Context, title string, d confirmPage) error {
	c.Set(ctxNoChange, true)
	if d.Hidden == nil {
		d.Hidden = resubmit(c)
	}
	return w.render(c, http.StatusOK, "admin_confirm", page{Title: title, Nav: navOf(c), Data: d})
}

func navOf(c echo.Context) string {
	switch p := c.Path(); {
	case len(p) >= len("/admin/plans") && p[:len("/admin/plans")] == "/admin/plans":
		return "plans"
	case len(p) >= len("/admin/events") && p[:len("/admin/events")] == "/admin/events":
		return "events"
	}
	return "tenants"
}

// resubmit is the posted form without the CSRF token and the confirmation,
// for the confirm form to post again as it was.
func resubmit(c echo.Context) []hiddenField {
	form, err := c.FormParams()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(form))
	for k := range form {
		if k != csrfField && k != confirmField && k != "more" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var out []hiddenField
	for _, k := range names {
		for _, v := range form[k] {
			out = append(out, hiddenField{Name: k, Value: v})
		}
	}
	return out
}

// limitSet is the limits people compare: of a tenant (a snapshot) or of a
// plan.
type limitSet struct {
	Plan        string
	Rate        *limiter.Rate
	Concurrency int64
	Quotas      map[string]quotaLimit
	Windows     string // windowsText; "" without windows
}

type quotaLimit struct {
	Limit   int64
	Mode    string
	PerSeat bool
}

func snapshotLimits(s limiter.Snapshot) limitSet {
	l := limitSet{Plan: s.Plan, Rate: s.Rate, Concurrency: s.Concurrency, Quotas: map[string]quotaLimit{}, Windows: snapshotWindowsText(s.Windows)}
	for m, q := range s.Quotas {
		mode := string(q.Mode)
		if mode == "" {
			mode = string(limiter.ModeHard)
		}
		l.Quotas[m] = quotaLimit{Limit: q.Limit, Mode: mode}
	}
	return l
}

func planLimits(p catalogue.Plan) limitSet {
	l := limitSet{Plan: p.Key, Rate: p.Rate, Quotas: map[string]quotaLimit{}}
	if len(p.Windows) > 0 {
		l.Windows = windowsText(p.Windows)
	}
	if p.Concurrency != nil {
		l.Concurrency = *p.Concurrency
	}
	for m, q := range p.Quotas {
		l.Quotas[m] = quotaLimit{Limit: q.Limit, Mode: q.Mode, PerSeat: q.PerSeat}
	}
	return l
}

func rateText(r *limiter.Rate) string {
	if r == nil {
		return "unlimited"
	}
	return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) + "/s, burst " + numfmt.Int(r.Burst)
}

func concurrencyText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return numfmt.Int(n)
}

func quotaText(q quotaLimit, ok bool) string {
	if !ok {
		return "unlimited"
	}
	s := numfmt.Int(q.Limit)
	if q.PerSeat {
		s += " per seat"
	}
	return s + " " + q.Mode
}

// diffLimits lists the plan, rate, concurrency and every quota of either
// side, before and after; used (meter → usage this period) marks the new
// hard limits usage already reaches.
func diffLimits(before, after limitSet, used map[string]int64) []limitChange {
	row := func(name, b, a string) limitChange {
		return limitChange{Name: name, Before: b, After: a, Changed: b != a}
	}
	out := []limitChange{
		row("Plan", before.Plan, after.Plan),
		row("Rate", rateText(before.Rate), rateText(after.Rate)),
		row("Concurrency", concurrencyText(before.Concurrency), concurrencyText(after.Concurrency)),
	}
	if before.Windows != "" || after.Windows != "" {
		out = append(out, row("Windows", noneIfEmpty(before.Windows), noneIfEmpty(after.Windows)))
	}
	meters := map[string]bool{}
	for m := range before.Quotas {
		meters[m] = true
	}
	for m := range after.Quotas {
		meters[m] = true
	}
	for _, m := range sortedKeys(meters) {
		bq, bok := before.Quotas[m]
		aq, aok := after.Quotas[m]
		r := row("Quota "+m, quotaText(bq, bok), quotaText(aq, aok))
		if used != nil {
			u := used[m] // a meter without usage yet has used nothing
			r.Used = &u
			r.Over = aok && aq.Mode == string(limiter.ModeHard) && u >= aq.Limit
		}
		out = append(out, r)
	}
	return out
}

// usedByMeter is the tenant's usage this period per meter, the figures of
// GET /v1/usage.
func (w *Web) usedByMeter(c echo.Context, tenantID string) (map[string]int64, error) {
	u, err := w.Usage.Usage(c.Request().Context(), tenantID)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, m := range u.Meters {
		out[m.Meter] = m.Used
	}
	return out, nil
}

func anyOver(rows []limitChange) bool {
	for _, r := range rows {
		if r.Over {
			return true
		}
	}
	return false
}
