package metering

import (
	"testing"
	"time"
)

func TestHourlyHistory(t *testing.T) {
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
