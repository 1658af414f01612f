package web

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/limiter"
)

// MeterView is one meter's bar.
type MeterView struct {
	Meter     string
	Used      int64
	Limit     int64
	HasLimit  bool
	Mode      string // hard or soft; "" without a limit
	Remaining int64
	Overage   int64
	Pct       float64 // used / limit in percent (may exceed 100)
	PctText   string  // Pct for people: "0%", "<1%", "42%", "130%"
	Over      bool
	Warn      bool
	// Projection says when the quota runs out at the period's pace so far.
	Projection string
	RunsOutAt  *time.Time
	Bar        template.HTML
}

// StatusView is the subscription status in words.
type StatusView struct {
	Label  string // "Active", "Trial", "Grace period", …
	Detail string
	Tone   string // ok, warn or bad
}

// UsageView is everything the dashboard and the tenant's console page show
// about usage.
type UsageView struct {
	Tenant      TenantRow
	Sub         *SubscriptionRow
	Snap        limiter.Snapshot
	Status      StatusView
	PeriodStart time.Time
	PeriodEnd   time.Time
	ResetIn     string
	Meters      []MeterView
	Windows     []WindowView // the plan's windows, live
	Charts      []Chart      // usage per day, one per meter with history or a quota
	Refusals    Chart        // refused requests per day, stacked by policy
	Now         time.Time
	// Stale is set when Redis did not answer in time: the figures are
	// Postgres's and the page says they may be behind.
	Stale bool
}

// usageView reads the tenant's usage. The numbers are GET /v1/usage's: the
// same metering function computes both.
func (w *Web) usageView(ctx context.Context, tenantID string) (UsageView, error) {
	now := w.Now().UTC()
	t, err := w.store.tenant(ctx, tenantID)
	if err != nil {
		return UsageView{}, err
	}
	sub, err := w.store.subscription(ctx, tenantID)
	if err != nil {
		return UsageView{}, err
	}
	snap, err := w.Snapshots.SnapshotFromPostgres(ctx, tenantID)
	if err != nil {
		return UsageView{}, fmt.Errorf("web: snapshot: %w", err)
	}
	u, err := w.Usage.Usage(ctx, tenantID)
	if err != nil {
		return UsageView{}, fmt.Errorf("web: usage: %w", err)
	}
	v := UsageView{Tenant: t, Sub: sub, Snap: snap, Now: now, Stale: u.Stale,
		PeriodStart: u.Period.Start, PeriodEnd: u.Period.End, Status: statusOf(snap, sub, t, w.DefaultPlan, now)}
	if v.PeriodEnd.After(now) {
		v.ResetIn = fmtDuration(v.PeriodEnd.Sub(now))
	}
	for _, m := range u.Meters {
		v.Meters = append(v.Meters, meterView(m, v.PeriodStart, v.PeriodEnd, now))
	}
	w.windowViews(ctx, &v)

	ds := days(v.PeriodStart, v.PeriodEnd)
	index := make(map[time.Time]int, len(ds))
	for i, d := range ds {
		index[d] = i
	}
	hist, err := w.store.dailyUsage(ctx, tenantID, v.PeriodStart)
	if err != nil {
		return UsageView{}, err
	}
	perMeter := map[string][]int64{}
	for _, h := range hist {
		i, ok := index[h.Day]
		if !ok {
			continue
		}
		if perMeter[h.Meter] == nil {
			perMeter[h.Meter] = make([]int64, len(ds))
		}
		perMeter[h.Meter][i] += h.Used
	}
	names := make([]string, 0, len(perMeter))
	seen := map[string]bool{}
	for _, m := range v.Meters {
		names, seen[m.Meter] = append(names, m.Meter), true
	}
	for m := range perMeter {
		if !seen[m] {
			names = append(names, m)
		}
	}
	sort.Strings(names)
	for _, m := range names {
		vals := perMeter[m]
		if vals == nil {
			vals = make([]int64, len(ds))
		}
		v.Charts = append(v.Charts, newChart(m+" per day", ds, []Series{{Name: m, Values: vals}}, now))
	}

	refused, err := w.store.dailyRefusals(ctx, tenantID, v.PeriodStart, v.PeriodEnd)
	if err != nil {
		return UsageView{}, err
	}
	// Today's refusals may not have been flushed yet: the limiter's own
	// counter for today is at least as new.
	today := now.Truncate(24 * time.Hour)
	rctx, cancel := context.WithTimeout(ctx, w.RedisTimeout)
	live, err := w.Limits.Refusals(rctx, tenantID, now)
	cancel()
	if err != nil {
		v.Stale = true
		w.log.WarnContext(ctx, "reading live refusals failed", "tenant_id", tenantID, "err", err)
	}
	perPolicy := map[string][]int64{}
	add := func(policy string, day time.Time, n int64, useMax bool) {
		i, ok := index[day]
		if !ok {
			return
		}
		if perPolicy[policy] == nil {
			perPolicy[policy] = make([]int64, len(ds))
		}
		if useMax {
			perPolicy[policy][i] = max(perPolicy[policy][i], n)
		} else {
			perPolicy[policy][i] += n
		}
	}
	for _, r := range refused {
		add(r.Policy, r.Day, r.Refused, false)
	}
	for p, n := range live {
		add(p, today, n, true)
	}
	policies := make([]string, 0, len(perPolicy))
	for p := range perPolicy {
		policies = append(policies, p)
	}
	sort.Strings(policies)
	series := make([]Series, 0, len(policies))
	for _, p := range policies {
		series = append(series, Series{Name: p, Values: perPolicy[p]})
	}
	v.Refusals = newChart("refused requests per day", ds, series, now)
	return v, nil
}

func meterView(m metering.MeterUsage, start, end, now time.Time) MeterView {
	v := MeterView{Meter: m.Meter, Used: m.Used, Mode: m.Mode, Overage: m.Overage}
	if m.Limit == nil {
		v.Projection = "No limit on this plan."
		return v
	}
	v.HasLimit, v.Limit = true, *m.Limit
	if m.Remaining != nil {
		v.Remaining = *m.Remaining
	}
	switch {
	case v.Limit == 0:
		v.Pct = 100
	default:
		v.Pct = 100 * float64(v.Used) / float64(v.Limit)
	}
	switch {
	case v.Pct > 0 && v.Pct < 1:
		v.PctText = "<1%"
	default:
		v.PctText = strconv.FormatFloat(math.Floor(v.Pct), 'f', 0, 64) + "%"
	}
	v.Over = v.Used > v.Limit || (v.Limit == 0 && v.Used > 0)
	v.Warn = !v.Over && v.Pct >= 80
	v.Bar = meterBar(v.Pct, v.Over)

	elapsed := now.Sub(start)
	switch {
	case v.Used >= v.Limit && v.Mode == string(limiter.ModeSoft):
		v.Projection = "Quota used up: further usage is billed as overage until the period resets."
	case v.Used >= v.Limit:
		v.Projection = "Quota used up: requests on this meter are refused until the period resets."
	case v.Used == 0 || elapsed <= 0:
		v.Projection = "No usage yet this period."
	case elapsed < projectAfter(start, end):
		// Minutes into a period the pace is noise: ten minutes of a busy
		// start projected "runs out around 05:00 today".
		v.Projection = "Too early to project: the pace is measured once " + fmtDuration(projectAfter(start, end)) +
			" of the period have passed (from " + fmtTime(start.Add(projectAfter(start, end))) + ")."
	default:
		// Pace so far, in units per second of the period elapsed.
		// Compared in float seconds first: a slow pace would overflow a
		// time.Duration.
		pace := float64(v.Used) / elapsed.Seconds()
		secs := float64(v.Limit-v.Used) / pace
		if secs < end.Sub(now).Seconds() {
			at := now.Add(time.Duration(secs * float64(time.Second)))
			v.RunsOutAt = &at
			if v.Mode == string(limiter.ModeSoft) {
				// A soft limit never refuses: what starts is billing.
				when := runsOut(at, now)
				if rest, ok := strings.CutPrefix(when, "around "); ok {
					when = "from around " + rest
				} else {
					when = "starting " + when
				}
				v.Projection = "At the current pace overage " + when + " (billed; nothing is refused)."
			} else {
				v.Projection = "At the current pace the quota runs out " + runsOut(at, now) + "."
			}
		} else {
			v.Projection = "At the current pace the quota lasts the whole period."
		}
	}
	return v
}

// projectAfter is how much of a period must have passed before its pace is
// projected: a day, or a tenth of a shorter period.
func projectAfter(start, end time.Time) time.Duration {
	return min(24*time.Hour, end.Sub(start)/10)
}

// statusOf puts the subscription status (and what it means for access) in
// words.
func statusOf(snap limiter.Snapshot, sub *SubscriptionRow, t TenantRow, defaultPlan string, now time.Time) StatusView {
	if sub == nil {
		return StatusView{Label: "Active", Detail: "No subscription: the plan is set by an admin.", Tone: "ok"}
	}
	switch sub.Status {
	case "active":
		d := "Renews " + fmtTime(derefTime(sub.PeriodEnd)) + "."
		if sub.CancelAtPeriodEnd {
			return StatusView{Label: "Cancels at period end", Detail: "Access to " + t.PlanName + " ends " + fmtTime(derefTime(sub.PeriodEnd)) + ".", Tone: "warn"}
		}
		return StatusView{Label: "Active", Detail: d, Tone: "ok"}
	case "trialing":
		d := "Trial"
		if sub.TrialEnd != nil {
			d = "Trial ends " + fmtTime(*sub.TrialEnd) + " (in " + fmtDuration(sub.TrialEnd.Sub(now)) + ")."
		}
		return StatusView{Label: "Trial", Detail: d, Tone: "ok"}
	case "past_due":
		if sub.GraceEndsAt != nil && now.Before(*sub.GraceEndsAt) {
			return StatusView{Label: "Payment failed: grace period", Tone: "warn",
				Detail: "The plan stays in force until " + fmtTime(*sub.GraceEndsAt) + "; after that it falls back to " + defaultPlan + " unless the payment succeeds."}
		}
		return StatusView{Label: "Payment failed", Tone: "bad",
			Detail: "The grace period has ended: on " + snap.Plan + " until the payment succeeds."}
	case "canceled", "unpaid", "incomplete_expired", "paused":
		return StatusView{Label: "Subscription " + sub.Status, Tone: "bad",
			Detail: "On " + snap.Plan + " until a subscription is active again."}
	default:
		return StatusView{Label: sub.Status, Tone: "warn"}
	}
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// runsOut says when a projected run-out happens, never before now: the hour
// is rounded up (truncating it showed 10:00 for a run-out at 10:50 seen at
// 10:40, a time already past), and a run-out within the hour says so.
func runsOut(at, now time.Time) string {
	if at.Sub(now) < time.Hour {
		return "within the hour"
	}
	up := at.Truncate(time.Hour)
	if up.Before(at) {
		up = up.Add(time.Hour)
	}
	return "around " + fmtTime(up)
}
