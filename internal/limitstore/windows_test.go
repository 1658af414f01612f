package limitstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestPlanWindowKeysMatchLimiter: the store reads the plan windows'
// counters where the limiter counts them, as the limiter counts them.
func TestPlanWindowKeysMatchLimiter(t *testing.T) {
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	st := limitstore.New(rdb, prefix)
	start := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	ws := []limiter.Window{
		{Name: "hourly", Limit: 50, Length: time.Hour, Kind: limiter.WindowFixed},
		{Name: "daily", Limit: 500, Length: 24 * time.Hour, Kind: limiter.WindowSliding},
		{Name: "other", Limit: 10, Length: time.Minute, Kind: limiter.WindowFixed},
	}
	snap := limiter.Snapshot{TenantID: "acme", Plan: "pro", Version: 1, Windows: ws,
		PeriodStart: start, PeriodEnd: start.Add(30 * 24 * time.Hour)}
	if err := st.PutSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, err := l.Allow(ctx, "acme", limiter.Request{Cost: 7}); err != nil || !d.Allowed || len(d.Policies) != 3 {
		t.Fatalf("%+v %v", d, err)
	}
	if _, err := l.Allow(ctx, "acme", limiter.Request{Cost: 51}); err != nil {
		t.Fatal(err) // refused by hourly: takes nothing
	}
	got, err := st.WindowUsage(ctx, "acme", ws[:2])
	if err != nil || len(got) != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	for _, u := range got {
		if u.Used != 7 || u.Reset <= 0 || u.Reset > u.Window.Length {
			t.Errorf("%s: %+v, want 7 used", u.Window.Name, u)
		}
	}
	if got, err := st.WindowUsage(ctx, "acme", ws[2:]); err != nil || got[0].Used != 7 {
		// every window counts every decision
		t.Errorf("other: %+v %v", got, err)
	}
}
