package metering

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

// Issue 26's exactness target end to end: 4 limiters × 50 clients against
// an included 5,000 and grants of 3,000 and 2,000 (made through credits,
// which writes them to Redis) admit exactly 10,000, and after a flush
// Postgres shows usage 10,000 and each grant's consumption as Redis
// decided it: 3,000 and 2,000. A replayed flush adds nothing.
func TestFlushRecordsGrantDrawsAsRedisDecided(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ents := entitlements.NewService(b.db, b.store, nil, entitlements.Options{Prefix: b.prefix})
	creds := credits.NewService(b.db, ents, nil, credits.Options{Grants: b.store})
	b.svc.opts.GrantDraws = func(ctx context.Context, tx pgx.Tx, ds []GrantDraw) error {
		in := make([]credits.Draw, len(ds))
		for i, d := range ds {
			in[i] = credits.Draw{FlushID: d.FlushID, GrantID: d.GrantID, PeriodStart: d.PeriodStart, Units: d.Units}
		}
		_, err := creds.RecordDrawsTx(ctx, tx, in)
		return err
	}
	limit := int64(5000)
	plan := "p" + randHex(6)
	if _, err := ents.CreatePlan(ctx, entitlements.PlanInput{Key: plan, Name: plan, Quotas: map[string]*entitlements.QuotaInput{
		"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
		t.Fatal(err)
	}
	tn, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "grants", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	amount := func(n int64) *int64 { return &n }
	prio := func(n int) *int { return &n }
	g3, err := creds.Create(ctx, tn.ID, credits.GrantInput{Meter: "requests", Amount: amount(3000), Priority: prio(1)})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := creds.Create(ctx, tn.ID, credits.GrantInput{Meter: "requests", Amount: amount(2000), Priority: prio(2)})
	if err != nil {
		t.Fatal(err)
	}

	var ls []*limiter.Limiter
	for range 4 {
		l, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: ents.LoadSnapshot,
			UsageLoader: b.svc.LoadUsage, GrantLoader: creds.RedisGrants})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls = append(ls, l)
	}
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for c := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; refused.Load() < 200; i++ {
				d, err := ls[(c+i)%len(ls)].Allow(ctx, tn.ID, limiter.Request{Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 10000 {
		t.Fatalf("admitted %d, want exactly 10,000", got)
	}
	st, err := b.svc.FlushOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Units != 10000 {
		t.Fatalf("flushed %d units, want 10,000", st.Units)
	}
	for _, w := range []struct {
		id   string
		want int64
	}{{g3.ID, 3000}, {g2.ID, 2000}} {
		g, err := creds.Get(ctx, w.id)
		if err != nil {
			t.Fatal(err)
		}
		if g.Consumed != w.want || g.Remaining != 0 {
			t.Fatalf("grant of %d: consumed %d, remaining %d in Postgres; want %d consumed as Redis decided", w.want, g.Consumed, g.Remaining, w.want)
		}
	}
	// Nothing is left to flush, and a second pass changes nothing.
	st, err = b.svc.FlushOnce(ctx)
	if err != nil || st.Units != 0 {
		t.Fatalf("second pass %+v, %v", st, err)
	}
	if g, _ := creds.Get(ctx, g3.ID); g.Consumed != 3000 {
		t.Fatalf("consumed %d after a second pass", g.Consumed)
	}
}

// GET /v1/usage shows, per quota, included, the active grants with what
// Redis holds of them (ahead of the ledger until the flush), and
// available: the unused included units plus the grants' remaining.
func TestUsageShowsGrants(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ents := entitlements.NewService(b.db, b.store, nil, entitlements.Options{Prefix: b.prefix})
	creds := credits.NewService(b.db, ents, nil, credits.Options{Grants: b.store})
	b.svc.opts.Snapshot = ents.Snapshot
	b.svc.opts.Grants = func(ctx context.Context, tenantID, meter string) ([]UsageGrant, error) {
		bal, err := creds.Balance(ctx, tenantID, meter, time.Now())
		if err != nil {
			return nil, err
		}
		var out []UsageGrant
		for _, g := range bal.Grants {
			out = append(out, UsageGrant{ID: g.ID, Remaining: g.Remaining, ExpiresAt: g.ExpiresAt, Source: g.Source})
		}
		return out, nil
	}
	limit, amount := int64(100), int64(50)
	plan := "p" + randHex(6)
	if _, err := ents.CreatePlan(ctx, entitlements.PlanInput{Key: plan, Name: plan, Quotas: map[string]*entitlements.QuotaInput{
		"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
		t.Fatal(err)
	}
	tn, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "usage", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	g, err := creds.Create(ctx, tn.ID, credits.GrantInput{Meter: "requests", Amount: &amount})
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Loader: ents.LoadSnapshot})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, err := l.Allow(ctx, tn.ID, limiter.Request{Cost: 120}); err != nil || !d.Allowed {
		t.Fatalf("120 of 100 included + 50 granted: %+v, %v", d, err)
	}
	u, err := b.svc.Usage(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Meters) != 1 {
		t.Fatalf("meters %+v", u.Meters)
	}
	m := u.Meters[0]
	if m.Used != 120 || m.Included == nil || *m.Included != 100 || *m.Remaining != 0 || m.Available == nil || *m.Available != 30 {
		t.Fatalf("usage %+v, want used 120, included 100, remaining 0, available 30", m)
	}
	if len(m.Grants) != 1 || m.Grants[0].ID != g.ID || m.Grants[0].Remaining != 30 || m.Grants[0].Source != credits.SourceAdmin || m.Grants[0].ExpiresAt != nil {
		t.Fatalf("grants %+v, want %s with Redis's 30 left", m.Grants, g.ID)
	}
}
