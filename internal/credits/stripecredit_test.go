package credits_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/credits"
)

func (b bundle) mirror(t *testing.T, c credits.StripeCredit) credits.StripeCreditResult {
	t.Helper()
	var res credits.StripeCreditResult
	err := pgx.BeginFunc(context.Background(), b.db, func(tx pgx.Tx) error {
		var err error
		res, err = b.svc.MirrorStripeCreditTx(context.Background(), tx, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A Stripe credit grant is mirrored once per meter, whatever later events
// say of its units; a void after its expiry passed (not yet written by the
// job) books what was left as expired, not voided, and the buckets still
// add up; draws recorded before the void keep their units consumed.
func TestMirrorStripeCredit(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	tn := b.tenant(t)
	now := b.clock.Now()
	exp := now.Add(time.Hour)
	c := credits.StripeCredit{TenantID: tn, ID: unique("credgr"), Units: map[string]int64{"requests": 300, "exports": 30, "empty": 0},
		Priority: 10, EffectiveAt: now.Add(-time.Minute), ExpiresAt: &exp, Updated: now, Reason: "Stripe credit grant"}
	res := b.mirror(t, c)
	if res.Created != 2 || !res.Changed || len(res.Grants) != 2 || res.Grants[0].Meter != "exports" || res.Grants[1].Amount != 300 {
		t.Fatalf("first mirror: %+v", res)
	}
	// Later events never add units or meters.
	again := c
	again.Units = map[string]int64{"requests": 999, "other": 5}
	if res := b.mirror(t, again); res.Created != 0 || res.Changed || len(res.Grants) != 2 || res.Grants[1].Amount != 300 {
		t.Fatalf("second mirror: %+v", res)
	}
	if _, err := b.svc.RecordDraws(ctx, []credits.Draw{{FlushID: "f1", GrantID: res.Grants[1].ID, PeriodStart: now.Add(-time.Hour), Units: 100}}); err != nil {
		t.Fatal(err)
	}
	// The expiry passes; Stripe's void arrives before the expiry job ran.
	b.clock.Advance(2 * time.Hour)
	void := c
	void.Voided, void.Updated = true, now.Add(time.Minute)
	res = b.mirror(t, void)
	if res.Changed || len(res.Grants) != 2 { // nothing was left to void
		t.Fatalf("void: %+v", res)
	}
	for _, g := range res.Grants {
		if g.Status != credits.StatusExpired || g.Voided != 0 || g.Remaining != 0 || g.Amount != g.Consumed+g.Remaining+g.Expired+g.Voided {
			t.Fatalf("grant voided after its expiry passed: %+v; want expired, nothing voided, balanced", g)
		}
	}
	if g := res.Grants[1]; g.Consumed != 100 || g.Expired != 200 {
		t.Fatalf("requests grant: consumed %d, expired %d; want 100 and 200", g.Consumed, g.Expired)
	}
}
