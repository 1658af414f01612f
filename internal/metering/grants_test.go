package metering

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Issue 26's exactness target end to end: 4 limiters × 50 clients against
// an included 5,000 and grants of 3,000 and 2,000 (made through credits,
// which writes them to Redis) admit exactly 10,000, and after a flush
// Postgres shows usage 10,000 and each grant's consumption as Redis
// decided it: 3,000 and 2,000. A replayed flush adds nothing.
func TestFlushRecordsGrantDrawsAsRedisDecided(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ents := entitlements.NewService(b.db, b.store, nil, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	creds := credits.NewService(b.db, ents, cat, nil, credits.Options{Grants: b.store})
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
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan, Quotas: map[string]*catalogue.QuotaInput{
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
		l, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Timeout: 2 * time.Second, Loader: ents.ReloadSnapshot,
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
	ents := entitlements.NewService(b.db, b.store, nil, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	creds := credits.NewService(b.db, ents, cat, nil, credits.Options{Grants: b.store})
	b.svc.opts.Snapshot = ents.SnapshotFromPostgres
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
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan, Quotas: map[string]*catalogue.QuotaInput{
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
	l, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Loader: ents.ReloadSnapshot})
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

// Reservations settled below, at and above their estimates (and
// cancelled) by 4 limiters while flushes run: a settlement gives back to
// the grants what the reservation drew and did not use (a refund after a
// flush recorded the draw is a negative draw), so that once the last
// flush is done Postgres holds each grant's remaining exactly as Redis
// decided it, and the usage Redis counted.
func TestFlushRecordsSettledGrantDraws(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	ents := entitlements.NewService(b.db, b.store, nil, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	creds := credits.NewService(b.db, ents, cat, nil, credits.Options{Grants: b.store})
	b.svc.opts.GrantDraws = func(ctx context.Context, tx pgx.Tx, ds []GrantDraw) error {
		in := make([]credits.Draw, len(ds))
		for i, d := range ds {
			in[i] = credits.Draw{FlushID: d.FlushID, GrantID: d.GrantID, PeriodStart: d.PeriodStart, Units: d.Units}
		}
		_, err := creds.RecordDrawsTx(ctx, tx, in)
		return err
	}
	limit := int64(100)
	plan := "p" + randHex(6)
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan, Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: &limit, Mode: "hard"}}}); err != nil {
		t.Fatal(err)
	}
	tn, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "settle", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	amount := func(n int64) *int64 { return &n }
	prio := func(n int) *int { return &n }
	var grants []credits.Grant
	for i, n := range []int64{1500, 20000} {
		g, err := creds.Create(ctx, tn.ID, credits.GrantInput{Meter: "requests", Amount: amount(n), Priority: prio(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	var ls []*limiter.Limiter
	for range 4 {
		l, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, Timeout: 10 * time.Second, Loader: ents.ReloadSnapshot,
			UsageLoader: b.svc.LoadUsage, GrantLoader: creds.RedisGrants})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls = append(ls, l)
	}
	done := make(chan struct{})
	flushed := make(chan error, 1)
	go func() {
		// flushes while reservations are made and settled: some refunds
		// come after their draws were recorded
		for {
			if _, err := b.svc.FlushOnce(ctx); err != nil {
				flushed <- err
				return
			}
			select {
			case <-done:
				flushed <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var settled atomic.Int64
	var wg sync.WaitGroup
	for c := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				l := ls[(c+i)%len(ls)]
				est := int64(1 + (c*7+i*3)%10)
				d, err := l.Allow(ctx, tn.ID, limiter.Request{Cost: est, Reserve: true})
				if err != nil || !d.Allowed || d.Reservation == nil {
					t.Errorf("reserve %d: %+v, %v", est, d, err)
					return
				}
				actual := int64((c*5 + i*11) % 13) // below, at or above the estimate; 0 cancels
				if _, err := ls[(c+i+1)%len(ls)].Settle(ctx, tn.ID, d.Reservation.ID, actual); err != nil {
					t.Error(err)
					return
				}
				settled.Add(actual)
			}
		}()
	}
	wg.Wait()
	close(done)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	if _, err := b.svc.FlushOnce(ctx); err != nil {
		t.Fatal(err)
	}
	keys := keyspace.Keys{Prefix: b.prefix}
	inRedis, err := keys.Grants(ctx, b.rdb, tn.ID, "requests")
	if err != nil {
		t.Fatal(err)
	}
	var drew int64
	for _, g := range grants {
		pg, err := creds.Get(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		var rem int64 = -1
		for _, r := range inRedis {
			if r.ID == g.ID {
				rem = r.Remaining
			}
		}
		if pg.Remaining != rem || pg.Consumed != pg.Amount-rem {
			t.Fatalf("grant of %d: Postgres remaining %d, consumed %d; Redis remaining %d", pg.Amount, pg.Remaining, pg.Consumed, rem)
		}
		drew += pg.Consumed
	}
	snap, err := ents.ReloadSnapshot(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	used, err := b.svc.LoadUsage(ctx, tn.ID, "requests", snap.PeriodStart)
	if err != nil || used != settled.Load() {
		t.Fatalf("durable usage %d (%v), settled %d", used, err, settled.Load())
	}
	if inc := used - drew; inc < 0 || inc > limit {
		t.Fatalf("usage %d, grants consumed %d: the included units gave %d, want 0 to %d", used, drew, inc, limit)
	}
	t.Logf("settled %d, grants consumed %d", used, drew)
}
