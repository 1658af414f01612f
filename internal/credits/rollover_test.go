package credits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// rolloverHook is what cmd/worker wires: metering's closed windows, handed
// to credits in the close's transaction.
func rolloverHook(svc *credits.Service) metering.PeriodsClosedFunc {
	return func(ctx context.Context, tx pgx.Tx, ws []metering.ClosedWindow) error {
		var in []credits.ClosedPeriod
		for _, w := range ws {
			for m, used := range w.Meters {
				in = append(in, credits.ClosedPeriod{TenantID: w.Tenant, Meter: m, Start: w.WindowStart, End: w.WindowEnd, Used: used})
			}
		}
		_, err := svc.RolloverTx(ctx, tx, in)
		return err
	}
}

// When the worker closes a window, the unused included units of a quota
// with a rollover (up to its max) become one rollover grant, effective
// from the window's end and expiring after expires_after_periods windows;
// closing again, or handing the same windows over again, makes no second
// grant; a quota used up or without rollover makes none; a failing hook
// leaves the windows open for the next run.
func TestRolloverAtPeriodClose(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	key := unique("plan")
	lim := int64(1000)
	_, err := b.cat.CreatePlan(ctx, catalogue.PlanInput{Key: key, Name: key, Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: &lim, Mode: "hard", Rollover: &catalogue.RolloverInput{Max: ptr(int64(300)), ExpiresAfterPeriods: ptr(1)}},
		"exports":  {Limit: &lim, Mode: "soft", Rollover: &catalogue.RolloverInput{Max: ptr(int64(5000)), ExpiresAfterPeriods: ptr(2)}},
		"seats":    {Limit: &lim, Mode: "hard"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tenant := func() string {
		tn, err := b.ents.CreateTenant(ctx, entitlements.TenantInput{Name: unique("tenant"), Plan: key})
		if err != nil {
			t.Fatal(err)
		}
		return tn.ID
	}
	light, heavy := tenant(), tenant()
	mclock := &clock{now: time.Now().UTC()}
	store := limitstore.New(b.rdb, b.prefix)
	meter := metering.NewService(b.db, store, nil, metering.Options{Now: mclock.Now, PeriodsClosed: rolloverHook(b.svc)})
	ingest := func(tn string, evs ...metering.Event) {
		t.Helper()
		for i := range evs {
			evs[i].ID, evs[i].Timestamp = unique("evt"), mclock.Now()
		}
		if _, err := meter.Ingest(ctx, tn, evs); err != nil {
			t.Fatal(err)
		}
	}
	ingest(light, metering.Event{Meter: "requests", Quantity: 900}, metering.Event{Meter: "exports", Quantity: 200}, metering.Event{Meter: "seats", Quantity: 1})
	ingest(heavy, metering.Event{Meter: "requests", Quantity: 1000}, metering.Event{Meter: "exports", Quantity: 1500})

	// The hook fails: nothing is closed, nothing granted.
	mclock.Advance(40 * 24 * time.Hour)
	failing := metering.NewService(b.db, store, nil, metering.Options{Now: mclock.Now,
		PeriodsClosed: func(context.Context, pgx.Tx, []metering.ClosedWindow) error { return errors.New("hook down") }})
	if _, err := failing.ClosePeriods(ctx); err == nil {
		t.Fatal("a failing hook did not fail the close")
	}
	var open int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM usage_periods WHERE tenant_id = ANY($1) AND closed_at IS NULL`, []string{light, heavy}).Scan(&open); err != nil || open != 5 {
		t.Fatalf("open windows after a failed close: %d, %v", open, err)
	}

	n, err := meter.ClosePeriods(ctx)
	if err != nil || n < 5 {
		t.Fatalf("close: %d, %v", n, err)
	}
	if again, err := meter.ClosePeriods(ctx); err != nil || again != 0 {
		t.Fatalf("second close: %d, %v", again, err)
	}
	var start, end time.Time
	if err := b.db.QueryRow(ctx, `SELECT period_start, period_end FROM usage_periods WHERE tenant_id = $1 AND meter = 'requests'`, light).Scan(&start, &end); err != nil {
		t.Fatal(err)
	}
	grants := func(tn string) map[string]credits.Grant {
		t.Helper()
		l, err := b.svc.List(ctx, tn)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]credits.Grant{}
		for _, g := range l {
			if g.Source == credits.SourceRollover {
				if _, dup := out[g.Meter]; dup {
					t.Fatalf("two rollover grants of %s: %+v", g.Meter, l)
				}
				out[g.Meter] = g
			}
		}
		return out
	}
	g := grants(light)
	req, exp := g["requests"], g["exports"]
	// requests: 100 unused (under max 300); exports: 800 unused (under 5000).
	if len(g) != 2 || req.Amount != 100 || exp.Amount != 800 || !req.EffectiveAt.Equal(end.UTC()) || req.Priority != credits.RolloverPriority {
		t.Fatalf("rollover grants: %+v", g)
	}
	// One window for requests, two for exports.
	d1, d2 := req.ExpiresAt.Sub(end), exp.ExpiresAt.Sub(end)
	if d1 < 28*24*time.Hour || d1 > 31*24*time.Hour || d2 < 59*24*time.Hour || d2 > 62*24*time.Hour {
		t.Fatalf("expiries %s and %s after the window's end %s", d1, d2, end)
	}
	if g := grants(heavy); len(g) != 0 {
		t.Fatalf("a tenant that used its quota got %+v", g)
	}
	// The same windows handed over again (a replayed close): nothing new.
	err = pgx.BeginFunc(ctx, b.db, func(tx pgx.Tx) error {
		made, err := b.svc.RolloverTx(ctx, tx, []credits.ClosedPeriod{{TenantID: light, Meter: "requests", Start: start, End: end, Used: 900}})
		if made != 0 {
			t.Errorf("a window rolled over twice: %d", made)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if g := grants(light); len(g) != 2 {
		t.Fatalf("after the replay: %+v", g)
	}
}
