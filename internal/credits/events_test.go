package credits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/credits"
)

// Grant events are found in the transaction of the draw or expiry that
// made them: a draw taking a grant under 20% is low, the last unit is
// depleted (a single draw can be both), a replayed flush announces
// nothing, an expiry with units left is expired (with nothing left, it is
// not), and an Events error rolls the draw back with it.
func TestGrantEventsOnDrawsAndExpiry(t *testing.T) {
	// Not parallel: ExpireDue expires every due grant of the package's
	// database, and another test's run (its service has no Events) would
	// expire this test's grants unannounced.
	b := setup(t)
	ctx := context.Background()
	var got []credits.GrantEvent
	fail := false
	tenant := b.tenant(t)
	svc := credits.NewService(b.db, b.ents, b.cat, nil, credits.Options{Now: b.clock.Now, Events: func(_ context.Context, tx pgx.Tx, evs []credits.GrantEvent) error {
		if tx == nil {
			t.Error("events outside a transaction")
		}
		if fail {
			return errors.New("outbox down")
		}
		for _, e := range evs {
			if e.Grant.TenantID == tenant { // others' due grants expire too
				got = append(got, e)
			}
		}
		return nil
	}})
	g := b.grant(t, tenant, 100, 10, nil)
	p := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	draw := func(flush string, units int64) {
		t.Helper()
		if _, err := svc.RecordDraws(ctx, []credits.Draw{{FlushID: flush, GrantID: g.ID, PeriodStart: p, Units: units}}); err != nil {
			t.Fatal(err)
		}
	}
	kinds := func() (ks []string) {
		for _, e := range got {
			ks = append(ks, e.Kind)
		}
		return ks
	}

	draw("f1", 80) // 20 left: not under 20%
	if len(got) != 0 {
		t.Fatalf("events at 20%% left: %+v", got)
	}
	draw("f2", 1) // 19 left
	if k := kinds(); len(k) != 1 || k[0] != credits.EventLow || got[0].Grant.Remaining != 19 || got[0].Units != 1 || got[0].Grant.ID != g.ID {
		t.Fatalf("after 81 of 100: %+v", got)
	}
	draw("f2", 1) // a replay
	if len(got) != 1 {
		t.Fatalf("a replayed flush announced %+v", got[1:])
	}
	fail = true
	if _, err := svc.RecordDraws(ctx, []credits.Draw{{FlushID: "f3", GrantID: g.ID, PeriodStart: p, Units: 19}}); err == nil {
		t.Fatal("an Events error must fail the draw")
	}
	if cur, _ := svc.Get(ctx, g.ID); cur.Remaining != 19 {
		t.Fatalf("the failed draw was kept: remaining %d", cur.Remaining)
	}
	fail = false
	draw("f3", 19)
	if k := kinds(); len(k) != 2 || k[1] != credits.EventDepleted || got[1].Grant.Remaining != 0 || got[1].Grant.Consumed != 100 {
		t.Fatalf("after the last unit: %+v", got)
	}

	// One draw from 50% to nothing is low and depleted.
	h := b.grant(t, tenant, 10, 10, nil)
	if _, err := svc.RecordDraws(ctx, []credits.Draw{{FlushID: "f4", GrantID: h.ID, PeriodStart: p, Units: 10}}); err != nil {
		t.Fatal(err)
	}
	if k := kinds(); len(k) != 4 || k[2] != credits.EventLow || k[3] != credits.EventDepleted {
		t.Fatalf("one draw of all: %v", k)
	}

	// Expiries: the job's, with units left, and none for an empty grant.
	soon := b.clock.Now().Add(time.Hour)
	e := b.grant(t, tenant, 40, 10, &soon)
	empty := b.grant(t, tenant, 5, 10, &soon)
	if _, err := svc.RecordDraws(ctx, []credits.Draw{{FlushID: "f5", GrantID: empty.ID, PeriodStart: p, Units: 5}}); err != nil {
		t.Fatal(err)
	}
	got = nil
	b.clock.Advance(2 * time.Hour)
	if n, err := svc.ExpireDue(ctx); err != nil || n < 2 {
		t.Fatalf("ExpireDue: %d %v", n, err) // others' due grants may be among them
	}
	if len(got) != 1 || got[0].Kind != credits.EventExpired || got[0].Grant.ID != e.ID || got[0].Units != 40 || got[0].Grant.Expired != 40 {
		t.Fatalf("expiry events %+v", got)
	}
	if _, err := svc.ExpireDue(ctx); err != nil || len(got) != 1 {
		t.Fatalf("a second run announced %+v (%v)", got, err)
	}

	// An expiry the flush books before its draw is announced too.
	later := b.clock.Now().Add(time.Hour)
	f := b.grant(t, tenant, 30, 10, &later)
	got = nil
	b.clock.Advance(2 * time.Hour)
	r, err := svc.RecordDraws(ctx, []credits.Draw{{FlushID: "f6", GrantID: f.ID, PeriodStart: p, Units: 3}})
	if err != nil || r[0].Attributed != 3 {
		t.Fatalf("draw after expiry: %+v %v", r, err)
	}
	if len(got) != 1 || got[0].Kind != credits.EventExpired || got[0].Units != 30 {
		t.Fatalf("expiry booked by a draw: %+v", got)
	}
}
