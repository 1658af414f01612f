package notify

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/limiter"
)

// Usage teetering at 80% (a reservation taking it over the line, its
// cancellation taking it back under, flushed each way by two flushers at
// once) produces exactly one quota.threshold at 80% and one delivery,
// however many times it goes across (it fails with a dedupe key that
// changes per flush). It teeters for the 30 s of wall time (at least
// 40 cycles however slow the machine), so a dedupe that expired or re-armed
// on a timer would show as a second event.
func TestTeeteringAt80PercentSendsOne(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	limit := int64(100)
	r := newQuotaRig(t, b, map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}}, metering.Options{})
	rc := newReceiver(t)
	if _, err := b.svc.Create(ctx, EndpointInput{URL: rc.srv.URL, Events: []string{TypeQuotaThreshold}}); err != nil {
		t.Fatal(err)
	}
	if got := r.allow(t, 78, ""); got != 78 {
		t.Fatalf("%d allowed, want 78", got)
	}
	r.flush(t)
	second := metering.NewService(b.db, r.store, nil, metering.Options{Snapshot: r.ents.SnapshotFromPostgres, Limits: r.ents.CachedSnapshot, Crossings: b.svc.QuotaCrossings})
	flushBoth := func() {
		t.Helper()
		var wg sync.WaitGroup
		for _, m := range []*metering.Service{r.meter, second} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := m.FlushOnce(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	usage := func() int64 {
		var u int64
		_ = b.db.QueryRow(ctx, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = $1 AND meter = 'requests'`, r.tenant.ID).Scan(&u)
		return u
	}
	const minCycles = 40
	start := time.Now()
	deadline := start.Add(120 * time.Second) // a bound for a busy machine, not a wait
	crossedUp, cycles := 0, 0
	for i := 0; (i < minCycles || time.Since(start) < 30*time.Second) && time.Now().Before(deadline); i++ {
		cycles++
		d, err := r.lim.Allow(ctx, r.tenant.ID, limiter.Request{Cost: 4, Reserve: true})
		if err != nil || !d.Allowed || d.Reservation == nil {
			t.Fatalf("cycle %d: reserve: %+v %v", i, d, err)
		}
		flushBoth()
		if u := usage(); u >= 80 {
			crossedUp++
		}
		if _, err := r.lim.Cancel(ctx, r.tenant.ID, d.Reservation.ID); err != nil {
			t.Fatal(err)
		}
		flushBoth()
		if u := usage(); u >= 80 {
			t.Fatalf("cycle %d: durable usage %d after the cancel, want back under 80", i, u)
		}
	}
	if time.Since(start) < 30*time.Second || cycles < minCycles {
		t.Fatalf("teetered %d cycles in %v, want 30 s and %d cycles", cycles, time.Since(start).Round(time.Millisecond), minCycles)
	}
	t.Logf("teetered %d cycles (%d over the line) in %v", cycles, crossedUp, time.Since(start).Round(time.Millisecond))
	if crossedUp < cycles/2 {
		t.Fatalf("usage went over 80%% in %d of %d cycles: the test did not teeter", crossedUp, cycles)
	}
	evs := eventsOf[QuotaThreshold](t, b, TypeQuotaThreshold)
	if len(evs) != 1 || evs[0].Threshold["percent"] != 80 || evs[0].TenantID != r.tenant.ID {
		t.Fatalf("events %+v, want exactly one at 80%%", evs)
	}
	waitFor(t, "the delivery", func() bool { return len(rc.requests()) >= 1 })
	waitFor(t, "nothing left to send", func() bool {
		var pending int
		_ = b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&pending)
		return pending == 0
	})
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("receiver got %d deliveries, want 1", n)
	}
}
