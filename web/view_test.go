package web

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/limiter"
)

func TestFmtDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		30 * time.Second:              "under a minute",
		time.Minute:                   "1 minute",
		2*time.Hour + 5*time.Minute:   "2 hours 5 minutes",
		3 * time.Hour:                 "3 hours",
		26 * time.Hour:                "1 day 2 hours",
		9*24*time.Hour + 23*time.Hour: "9 days 23 hours",
		48 * time.Hour:                "2 days",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestDaysCoverThePeriod(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
	ds := days(start, time.Date(2026, 2, 28, 10, 0, 0, 0, time.UTC))
	if len(ds) != 29 || !ds[0].Equal(time.Date(2026, 1, 31, 0, 0, 0, 0, time.UTC)) || !ds[28].Equal(time.Date(2026, 2, 28, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%d days from %v to %v", len(ds), ds[0], ds[len(ds)-1])
	}
}

func TestChartEscapesAndStacks(t *testing.T) {
	t.Parallel()
	ds := days(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC))
	c := newChart("x", ds, []Series{{Name: `<b>"rate"`, Values: []int64{1, 0, 5}}, {Name: "requests", Values: []int64{2, 0, 5}}},
		time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC))
	if c.Total != 13 || c.Max != 10 {
		t.Fatalf("total %d max %d", c.Total, c.Max)
	}
	svg := string(c.SVG)
	if strings.Contains(svg, "<b>") || !strings.Contains(svg, "&lt;b&gt;") {
		t.Fatal("series names must be escaped inside the SVG")
	}
	if n := strings.Count(svg, `class="s0"`) + strings.Count(svg, `class="s1"`); n != 4 {
		t.Fatalf("%d bars, want 4 (day 2 is empty)", n)
	}
	if rows := c.Rows(); rows[2].Total != 10 || len(rows[2].Values) != 2 {
		t.Fatalf("table rows %+v", rows)
	}
	// Days after today are placeholders, not bars.
	ahead := newChart("x", ds, []Series{{Name: "a", Values: []int64{1, 1, 1}}}, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if strings.Count(string(ahead.SVG), `class="ahead"`) != 2 {
		t.Fatal("the two days ahead must be drawn as placeholders")
	}
}

func TestMeterView(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	now := start.Add(10 * 24 * time.Hour)
	l := func(n int64) *int64 { return &n }

	// 40,000 of 100,000 in 10 days: runs out 15 days later, inside the period.
	v := meterView(metering.MeterUsage{Meter: "requests", Used: 40000, Limit: l(100000), Remaining: l(60000), Mode: "hard"}, start, end, now)
	if v.RunsOutAt == nil || !v.RunsOutAt.Equal(now.Add(15*24*time.Hour)) || v.PctText != "40%" || v.Over || v.Warn {
		t.Fatalf("%+v", v)
	}
	// A tiny pace must not overflow time.Duration (it once said "1734").
	v = meterView(metering.MeterUsage{Meter: "requests", Used: 1, Limit: l(1 << 62), Remaining: l(1<<62 - 1), Mode: "hard"}, start, end, now)
	if v.RunsOutAt != nil || !strings.Contains(v.Projection, "whole period") || v.PctText != "<1%" {
		t.Fatalf("%+v", v)
	}
	// Over a soft limit: overage, billed.
	v = meterView(metering.MeterUsage{Meter: "exports", Used: 61, Limit: l(50), Remaining: l(0), Mode: "soft", Overage: 11}, start, end, now)
	if !v.Over || v.Overage != 11 || !strings.Contains(v.Projection, "overage") || v.PctText != "122%" {
		t.Fatalf("%+v", v)
	}
	// Used up a hard limit: refused until the reset.
	v = meterView(metering.MeterUsage{Meter: "requests", Used: 100, Limit: l(100), Remaining: l(0), Mode: "hard"}, start, end, now)
	if v.Over || !strings.Contains(v.Projection, "refused") {
		t.Fatalf("%+v", v)
	}
	// 85%: a warning.
	if v = meterView(metering.MeterUsage{Meter: "r", Used: 85, Limit: l(100), Remaining: l(15), Mode: "hard"}, start, end, now); !v.Warn {
		t.Fatalf("%+v", v)
	}
	// No limit.
	if v = meterView(metering.MeterUsage{Meter: "seats", Used: 7}, start, end, now); v.HasLimit || v.Bar != "" {
		t.Fatalf("%+v", v)
	}
}

func TestStatusInWords(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	later, earlier := now.Add(48*time.Hour), now.Add(-time.Hour)
	snap := limiter.Snapshot{Plan: "pro"}
	tn := TenantRow{PlanName: "Pro"}
	for _, tc := range []struct {
		sub        *SubscriptionRow
		label, has string
	}{
		{nil, "Active", "No subscription"},
		{&SubscriptionRow{Status: "active", PeriodEnd: &later}, "Active", "Renews 12 Mar 2026"},
		{&SubscriptionRow{Status: "active", PeriodEnd: &later, CancelAtPeriodEnd: true}, "Cancels at period end", "ends 12 Mar"},
		{&SubscriptionRow{Status: "trialing", TrialEnd: &later}, "Trial", "in 2 days"},
		{&SubscriptionRow{Status: "past_due", GraceEndsAt: &later}, "Payment failed: grace period", "falls back to free"},
		{&SubscriptionRow{Status: "past_due", GraceEndsAt: &earlier}, "Payment failed", "grace period has ended"},
		{&SubscriptionRow{Status: "canceled"}, "Subscription canceled", "until a subscription is active"},
	} {
		s := statusOf(snap, tc.sub, tn, "free", now)
		if s.Label != tc.label || !strings.Contains(s.Detail, tc.has) {
			t.Errorf("%+v: %+v", tc.sub, s)
		}
	}
}

func TestUpgradesAreBiggerPlans(t *testing.T) {
	t.Parallel()
	plan := func(key string, qs ...QuotaRow) PlanRow { return PlanRow{Key: key, Quotas: qs} }
	plans := []PlanRow{
		plan("free", QuotaRow{Meter: "requests", Limit: 1000}),
		plan("pro", QuotaRow{Meter: "requests", Limit: 100000}, QuotaRow{Meter: "exports", Limit: 50}),
		plan("pro-same", QuotaRow{Meter: "requests", Limit: 100000}, QuotaRow{Meter: "exports", Limit: 50}),
		plan("mixed", QuotaRow{Meter: "requests", Limit: 200000}, QuotaRow{Meter: "exports", Limit: 10}),
		plan("team", QuotaRow{Meter: "requests", Limit: 1000000}, QuotaRow{Meter: "exports", Limit: 500}),
		plan("enterprise"),
	}
	var got []string
	for _, p := range upgrades(plans, "pro") {
		got = append(got, p.Key)
	}
	if strings.Join(got, ",") != "team,enterprise" {
		t.Fatalf("upgrades of pro: %v", got)
	}
	if len(upgrades(plans, "enterprise")) != 0 || len(upgrades(plans, "gone")) != 0 {
		t.Fatal("nothing is bigger than unlimited, and an unknown plan has no upgrades")
	}
}

// The run-out time is never shown in the past: 10:50 seen at 10:40 was shown
// as "10:00" (the hour truncated).
func TestProjectionNeverInThePast(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	l := func(n int64) *int64 { return &n }
	// 10 days in, 9,990 of 10,000 used: the last 10 run out in about 43 s.
	now := start.Add(10*24*time.Hour + 10*time.Hour + 40*time.Minute)
	v := meterView(metering.MeterUsage{Meter: "requests", Used: 9990, Limit: l(10000), Remaining: l(10), Mode: "hard"}, start, end, now)
	if v.RunsOutAt == nil || !v.RunsOutAt.After(now) || !strings.Contains(v.Projection, "within the hour") {
		t.Fatalf("%+v", v)
	}
	// A run-out at 13:20 shows as 14:00, not 13:00.
	if got := runsOut(time.Date(2026, 3, 11, 13, 20, 0, 0, time.UTC), now); got != "around 11 Mar 2026 14:00 UTC" {
		t.Fatalf("runsOut = %q", got)
	}
	if got := runsOut(time.Date(2026, 3, 11, 13, 0, 0, 0, time.UTC), now); got != "around 11 Mar 2026 13:00 UTC" {
		t.Fatalf("runsOut on the hour = %q", got)
	}
}

// The run-out projection waits for a day of the period (or a tenth of a
// shorter one) and says so; ten minutes of a busy start once projected
// "runs out around 05:00 today". A soft limit projects overage, not a
// run-out.
func TestProjectionWaitsForADayAndSoftLimitsProjectOverage(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	l := func(n int64) *int64 { return &n }
	early := start.Add(10 * time.Minute)
	for _, mode := range []string{"hard", "soft"} {
		v := meterView(metering.MeterUsage{Meter: "requests", Used: 500, Limit: l(1000), Remaining: l(500), Mode: mode}, start, end, early)
		if v.RunsOutAt != nil || !strings.Contains(v.Projection, "Too early to project") || !strings.Contains(v.Projection, "1 day") ||
			!strings.Contains(v.Projection, fmtTime(start.Add(24*time.Hour))) {
			t.Fatalf("%s, ten minutes in: %+v", mode, v)
		}
	}
	// A day in, the pace counts.
	day := start.Add(25 * time.Hour)
	v := meterView(metering.MeterUsage{Meter: "requests", Used: 500, Limit: l(1000), Remaining: l(500), Mode: "hard"}, start, end, day)
	if v.RunsOutAt == nil || !strings.Contains(v.Projection, "quota runs out around") {
		t.Fatalf("hard, a day in: %+v", v)
	}
	v = meterView(metering.MeterUsage{Meter: "exports", Used: 500, Limit: l(1000), Remaining: l(500), Mode: "soft"}, start, end, day)
	if v.RunsOutAt == nil || !strings.Contains(v.Projection, "overage from around") || strings.Contains(v.Projection, "runs out") {
		t.Fatalf("soft, a day in: %+v", v)
	}
	// A short period: a tenth of it is enough.
	short := start.Add(10 * time.Hour)
	v = meterView(metering.MeterUsage{Meter: "requests", Used: 50, Limit: l(1000), Remaining: l(950), Mode: "hard"}, start, short, start.Add(90*time.Minute))
	if strings.Contains(v.Projection, "Too early") {
		t.Fatalf("an hour and a half into a 10-hour period: %+v", v)
	}
}
