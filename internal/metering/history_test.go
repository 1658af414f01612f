package metering

import (
	"fmt"
	"testing"
	"time"
)

// hourlyRow is a usage_hourly row as a test compares it.
type hourlyRow struct {
	start, hour time.Time
	used        int64
}

func (r hourlyRow) String() string {
	return fmt.Sprintf("{%s %s %d}", r.start.UTC().Format(time.DateTime), r.hour.UTC().Format(time.DateTime), r.used)
}

func TestHourlyHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-10*24*time.Hour))
	now := time.Now().UTC()
	h0 := now.Truncate(time.Hour)
	evs := []Event{
		ev("a", "exports", 2, h0.Add(-2*time.Hour+time.Minute)),
		ev("b", "exports", 3, h0.Add(-2*time.Hour+30*time.Minute)),
		ev("c", "exports", 5, h0.Add(time.Second)),
		ev("d", "tokens", 7, h0.Add(time.Second)),
	}
	if _, err := b.svc.Ingest(b.ctx, tenant, evs); err != nil {
		t.Fatal(err)
	}
	pts, err := b.svc.Hourly(b.ctx, tenant, h0.Add(-3*time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []HourlyPoint{{"exports", h0.Add(-2 * time.Hour), 5}, {"exports", h0, 5}, {"tokens", h0, 7}}
	if len(pts) != len(want) {
		t.Fatalf("points = %+v, want %+v", pts, want)
	}
	for i := range want {
		if pts[i].Meter != want[i].Meter || !pts[i].Hour.Equal(want[i].Hour) || pts[i].Used != want[i].Used {
			t.Fatalf("point %d = %+v, want %+v", i, pts[i], want[i])
		}
	}
	if pts, _ := b.svc.Hourly(b.ctx, tenant, h0.Add(-time.Hour), h0); len(pts) != 0 {
		t.Fatalf("empty window = %+v", pts)
	}
}

// The hour a period starts in holds usage of two periods: each period's
// part is its own row (events by their period, flushes by their claim's),
// so a period's history never includes the previous period's last
// minutes. Hourly still sums the hour.
func TestHourlyRowsPerPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	tenant := b.newTenant(t, h.Add(37*time.Minute)) // the period starts at :37
	tp, err := loadTenantPeriods(b.ctx, b.db, tenant)
	if err != nil {
		t.Fatal(err)
	}
	prev, cur := tp.at(h.Add(10*time.Minute)).Start, tp.at(h.Add(40*time.Minute)).Start
	if !cur.Equal(h.Add(37*time.Minute)) || !prev.Before(cur) {
		t.Fatalf("set-up: periods %v and %v", prev, cur)
	}
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{
		ev(randHex(8), "exports", 5, h.Add(10*time.Minute)), // the previous period's end
		ev(randHex(8), "exports", 7, h.Add(40*time.Minute)), // the new period's start
	}); err != nil {
		t.Fatal(err)
	}
	flushAt := func(now time.Time, claims ...FlushClaim) {
		t.Helper()
		b.svc.opts.Now = func() time.Time { return now }
		if out, _, err := b.svc.commitClaims(b.ctx, claims); err != nil || out[0] != commitCommitted {
			t.Fatalf("commit: %v %v", out, err)
		}
	}
	// At :50 the worker flushes what the limiter counted in both periods.
	flushAt(h.Add(50*time.Minute),
		FlushClaim{ID: randHex(8), Tenant: tenant, Meter: "exports", PeriodStart: prev, N: 3},
		FlushClaim{ID: randHex(8), Tenant: tenant, Meter: "exports", PeriodStart: cur, N: 4})
	// A worker clock behind Redis's, still in the hour before: the new
	// period's units go in its first hour, not before the period.
	flushAt(h.Add(-time.Second), FlushClaim{ID: randHex(8), Tenant: tenant, Meter: "exports", PeriodStart: cur, N: 2})

	rows, err := b.db.Query(b.ctx, `SELECT period_start, hour, used FROM usage_hourly WHERE tenant_id = $1 ORDER BY period_start, hour`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	var got []hourlyRow
	var r hourlyRow
	for rows.Next() {
		if err := rows.Scan(&r.start, &r.hour, &r.used); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []hourlyRow{{prev, h, 5 + 3}, {cur, h, 7 + 4 + 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows (period start, hour, used)\n%v\nwant\n%v", got, want)
	}
	pts, err := b.svc.Hourly(b.ctx, tenant, h, h.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 1 || pts[0].Used != 21 {
		t.Fatalf("Hourly = %+v, want one point of 21", pts)
	}
}
