package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// 1,000 concurrent decisions through two limiter instances (what two api
// processes run, on one Redis), flushed by two concurrent flushers (two
// workers), cross 80% and 100% of a quota: exactly one quota.threshold
// event each, written with the flushed figures, and exactly one delivery
// of each to a real receiver, counted by webhook-id; usage going on past
// the line adds none.
func TestQuotaThresholdsExactlyOnceAcrossTwoFlushers(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	rdb, prefix := redistest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(b.db, store, log, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	limit := int64(500)
	plan := fmt.Sprintf("wh%d", time.Now().UnixNano())
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan,
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
		t.Fatal(err)
	}
	tenant, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "t", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t)
	if _, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL, Events: []string{TypeQuotaThreshold}}); err != nil {
		t.Fatal(err)
	}
	flusher := func() *metering.Service {
		return metering.NewService(b.db, store, log, metering.Options{Snapshot: ents.SnapshotFromPostgres, Limits: ents.CachedSnapshot, Crossings: b.svc.QuotaCrossings})
	}
	f1, f2 := flusher(), flusher()
	lims := make([]*limiter.Limiter, 2)
	for i := range lims {
		l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, UsageLoader: f1.LoadUsage, Timeout: 5 * time.Second, DisableRefusalCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		lims[i] = l
	}
	var allowed atomic.Int64
	stop := make(chan struct{})
	var fw sync.WaitGroup
	for _, f := range []*metering.Service{f1, f2} {
		fw.Add(1)
		go func() {
			defer fw.Done()
			for {
				if _, err := f.FlushOnce(ctx); err != nil {
					t.Error(err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	var dw sync.WaitGroup
	for g := 0; g < 20; g++ {
		dw.Add(1)
		go func() {
			defer dw.Done()
			for i := 0; i < 50; i++ {
				d, err := lims[g%2].Allow(ctx, tenant.ID, limiter.Request{Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	dw.Wait()
	close(stop)
	fw.Wait()
	for _, f := range []*metering.Service{f1, f2} { // what the loops left
		if _, err := f.FlushOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := allowed.Load(); got != limit {
		t.Fatalf("%d allowed of 1000, want the limit %d", got, limit)
	}
	rows, err := b.db.Query(ctx, `SELECT payload FROM webhook_events WHERE type = 'quota.threshold' ORDER BY payload->'threshold'->>'percent'`)
	if err != nil {
		t.Fatal(err)
	}
	var got []QuotaThreshold
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var ev struct{ Data QuotaThreshold }
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Data)
	}
	if len(got) != 2 || got[0].Threshold["percent"] != 100 && got[0].Threshold["percent"] != 80 {
		t.Fatalf("events %+v, want one at 80%% and one at 100%%", got)
	}
	seen := map[int64]bool{}
	for _, g := range got {
		p := g.Threshold["percent"]
		seen[p] = true
		if g.TenantID != tenant.ID || g.Meter != "requests" || g.Limit != limit || g.Used < limit*p/100 || g.WindowEnd.Before(g.WindowStart) || g.WindowStart.IsZero() {
			t.Errorf("event %+v", g)
		}
	}
	if !seen[80] || !seen[100] {
		t.Errorf("thresholds %v, want 80 and 100", seen)
	}
	waitFor(t, "two deliveries", func() bool { return len(r.requests()) == 2 })
	waitFor(t, "nothing left to send", func() bool {
		var pending int
		_ = b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&pending)
		return pending == 0
	})
	ids := map[string]int{}
	for _, g := range r.requests() {
		ids[g.header.Get("webhook-id")]++
	}
	if len(r.requests()) != 2 || len(ids) != 2 {
		t.Fatalf("receiver got %d requests with webhook-ids %v, want one each of 2", len(r.requests()), ids)
	}

	// The same crossing found again (a replay, a limit that teeters) adds
	// nothing; the next window re-arms it.
	c := metering.Crossing{Tenant: tenant.ID, Meter: "requests", Percent: 80, Used: 170, Limit: limit,
		WindowStart: got[0].WindowStart, WindowEnd: got[0].WindowEnd}
	next := c
	next.WindowStart, next.WindowEnd = c.WindowEnd, c.WindowEnd.AddDate(0, 1, 0)
	b.quotaCrossings(t, c)
	if n := b.countEvents(t); n != 2 {
		t.Errorf("%d events after a replayed crossing, want still 2", n)
	}
	b.quotaCrossings(t, next)
	if n := b.countEvents(t); n != 3 {
		t.Errorf("%d events after a crossing in the next window, want 3", n)
	}
}

func (b bundle) quotaCrossings(t *testing.T, cs ...metering.Crossing) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error { return b.svc.QuotaCrossings(ctx, tx, cs) }); err != nil {
		t.Fatal(err)
	}
}

func (b bundle) countEvents(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(context.Background(), `SELECT count(*) FROM webhook_events WHERE type = 'quota.threshold'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
