package limiter_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
)

// TestByReferenceTenantsOnOnePlanKeepTheirOwnPeriods: tenants on one plan
// have periods of their own (each subscription's billing anchor). Decided
// by reference they share one parsed plan per period length, yet each
// decision reports its own period's window, counts in its own period's
// counter, and a missing counter is rebuilt from its own period's durable
// usage.
func TestByReferenceTenantsOnOnePlanKeepTheirOwnPeriods(t *testing.T) {
	ctx := context.Background()
	b := singleRedis(t)
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	starts := map[string]time.Time{}
	lengths := map[string]int{}
	for i, c := range []struct {
		tenant string
		start  time.Time
		days   int
	}{
		{"ps-a", day.Add(-24 * time.Hour), 30},
		{"ps-b", day.Add(-24*time.Hour - 7*time.Hour), 30}, // A's length, other dates
		{"ps-c", day.Add(-48 * time.Hour), 28},
		{"ps-d", day.Add(-72*time.Hour + 13*time.Minute), 31},
	} {
		starts[c.tenant], lengths[c.tenant] = c.start, c.days
		put(t, st, limiter.Snapshot{
			TenantID: c.tenant, Plan: "pro", Status: "active", Version: int64(i + 1),
			Rate:        &limiter.Rate{PerSecond: 100, Burst: 100},
			Quotas:      map[string]limiter.Quota{"requests": {Limit: 1000, Mode: limiter.ModeHard}},
			PeriodStart: c.start, PeriodEnd: c.start.AddDate(0, 0, c.days), NextPeriodEnd: c.start.AddDate(0, 0, 2*c.days),
		})
	}
	put(t, st, snapshot("ps-fill", nil))
	var mu sync.Mutex
	loaded := map[string]time.Time{}
	opts := limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, CacheSize: 1, DisableRefusalCache: true,
		UsageLoader: func(ctx context.Context, tenant, meter string, periodStart time.Time) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			loaded[tenant] = periodStart
			return 10, nil // durable usage of the period asked for
		}}
	l := newLimiter(t, rdb, opts)
	peek(t, l, "ps-fill") // the near-cache is full: the others go by reference
	writer := newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second})
	for _, tn := range []string{"ps-a", "ps-b", "ps-c", "ps-d"} {
		peek(t, writer, tn) // writes the tenant's limits hash
	}
	for _, tn := range []string{"ps-a", "ps-b", "ps-c", "ps-d"} {
		var d *limiter.Decision
		for i := 0; i < 2; i++ {
			var err error
			if d, err = l.Allow(ctx, tn, limiter.Request{Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("%s: %v %v", tn, d, err)
			}
		}
		q := d.Policies[len(d.Policies)-1]
		if want := time.Duration(lengths[tn]) * 24 * time.Hour; q.Name != "requests" || q.Window != want || q.Remaining != 1000-10-2 {
			t.Errorf("%s: quota %+v, want window %v and 988 left", tn, q, want)
		}
		if got := loaded[tn]; !got.Equal(starts[tn]) {
			t.Errorf("%s: counter rebuilt from the period starting %v, want its own %v", tn, got, starts[tn])
		}
		field := "q:requests:" + strconv.FormatInt(starts[tn].Unix(), 10)
		if n, err := rdb.HGet(ctx, b.prefix+":{t:"+tn+"}:st", field).Int64(); err != nil || n != 12 {
			t.Errorf("%s: %s = %d (%v), want 12", tn, field, n, err)
		}
	}
	// A and B share a shape (one plan, one period length); C and D have
	// their own lengths.
	if n := limiter.RefShapes(l); n != 3 {
		t.Errorf("%d shapes for 4 tenants on one plan with 3 period lengths, want 3", n)
	}
}
