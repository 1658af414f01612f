package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// BenchmarkCrossingToDelivery measures, per crossing, the time from the
// decision that crossed 80% of a quota to the receiver's 2xx: the flush
// loop at the default FLUSH_INTERVAL (1s) finds it, the outbox commits it
// with the figures, a River worker (default fetch settings) sends it. The
// crossings of a round happen at random moments of a flush interval, so
// the figures cover every phase. It reports p50 and p99 in ms.
func BenchmarkCrossingToDelivery(b *testing.B) {
	const flushInterval = time.Second // FLUSH_INTERVAL's default
	bd := setup(b, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	rdb, prefix := redistest.New(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(bd.db, store, log, entitlements.Options{})
	cat := catalogue.NewService(bd.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	m := metering.NewService(bd.db, store, log, metering.Options{Snapshot: ents.SnapshotFromPostgres, Limits: ents.CachedSnapshot, Crossings: bd.svc.QuotaCrossings})
	lim, err := limiter.New(rdb, limiter.Options{Prefix: prefix, UsageLoader: m.LoadUsage, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close()
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	got := make(chan struct{}, 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		var ev struct{ Data QuotaThreshold }
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		arrived[ev.Data.TenantID] = now
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		got <- struct{}{}
	}))
	defer srv.Close()
	if _, err := bd.svc.Create(ctx, EndpointInput{URL: srv.URL, Events: []string{TypeQuotaThreshold}}); err != nil {
		b.Fatal(err)
	}
	limit := int64(10)
	plan := fmt.Sprintf("bench%d", time.Now().UnixNano())
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan,
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
		b.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	var fw sync.WaitGroup
	fw.Add(1)
	go func() { defer fw.Done(); m.RunFlusher(fctx, flushInterval, nil) }()
	defer func() { stop(); fw.Wait() }()

	const perRound = 10
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		tenants := make([]string, perRound)
		for i := range tenants {
			tn, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "bench", Plan: plan})
			if err != nil {
				b.Fatal(err)
			}
			tenants[i] = tn.ID
			for range 7 { // 70%: the next decision crosses 80%
				if _, err := lim.Allow(ctx, tn.ID, limiter.Request{Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
		}
		// Let the 70% reach Postgres first, so that the crossing is the
		// 8th decision's and not the flush of all eight.
		time.Sleep(flushInterval + 200*time.Millisecond)
		crossed := make([]time.Time, perRound)
		var wg sync.WaitGroup
		for i, tn := range tenants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.Int64N(int64(flushInterval))))
				crossed[i] = time.Now()
				if _, err := lim.Allow(ctx, tn, limiter.Request{Cost: 1}); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		for range perRound {
			select {
			case <-got:
			case <-time.After(30 * time.Second):
				b.Fatal("a crossing was not delivered within 30s")
			}
		}
		mu.Lock()
		for i, tn := range tenants {
			lat = append(lat, arrived[tn].Sub(crossed[i]))
		}
		mu.Unlock()
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(len(lat)), "crossings")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFlushPass is one flush pass over 100 tenants' dirty counters,
// without the crossing hook (Options.Crossings nil, as with notifications
// off) and with it (the snapshot read per flushed tenant, the threshold
// check, nothing crossed): the whole cost notifications add, all of it in
// the worker and none on the decision.
func BenchmarkFlushPass(b *testing.B) {
	for _, hook := range []bool{false, true} {
		b.Run(map[bool]string{false: "hook=off", true: "hook=on"}[hook], func(b *testing.B) {
			bd := setup(b, Options{AllowHTTP: true, AllowPrivate: true})
			ctx := context.Background()
			rdb, prefix := redistest.New(b)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			store := limitstore.New(rdb, prefix)
			ents := entitlements.NewService(bd.db, store, log, entitlements.Options{})
			cat := catalogue.NewService(bd.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
			opts := metering.Options{Snapshot: ents.SnapshotFromPostgres, Limits: ents.CachedSnapshot}
			if hook {
				opts.Crossings = bd.svc.QuotaCrossings
			}
			m := metering.NewService(bd.db, store, log, opts)
			lim, err := limiter.New(rdb, limiter.Options{Prefix: prefix, UsageLoader: m.LoadUsage, Timeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			limit := int64(1 << 40)
			plan := fmt.Sprintf("fp%d", time.Now().UnixNano())
			if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan,
				Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
				b.Fatal(err)
			}
			tenants := make([]string, 100)
			for i := range tenants {
				tn, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "fp", Plan: plan})
				if err != nil {
					b.Fatal(err)
				}
				tenants[i] = tn.ID
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, tn := range tenants {
					if _, err := lim.Allow(ctx, tn, limiter.Request{Cost: 1}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if _, err := m.FlushOnce(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
