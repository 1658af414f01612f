package metering

import (
	"testing"
	"time"
)

// A billing cycle anchor moved by the customer portal (2025-12-15.clover)
// starts a new subscription period inside the open window: the close job
// closes the old window with its figure and the end it really had (the new
// anchor), and leaves a window that a renewal ended as it was.
func TestAMovedAnchorClosesTheOldWindowWithItsFigure(t *testing.T) {
	// Not parallel: ClosePeriods closes every open period of the database.
	b := setup(t)
	b.svc.opts.CloseGrace = time.Millisecond
	tenant := b.newTenant(t, time.Now().Add(-90*24*time.Hour))
	oldStart := time.Now().Add(-10 * 24 * time.Hour).UTC().Truncate(time.Second)
	oldEnd := oldStart.AddDate(0, 1, 0)
	sub := "sub_" + randHex(6)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end)
		VALUES ($1, $2, 'cus_anchor', 'active', $3, $4)`, sub, tenant, oldStart, oldEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, 'requests', $2, $3, 42)`,
		tenant, oldStart, oldEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.ClosePeriods(b.ctx); err != nil {
		t.Fatal(err)
	}
	var closed *time.Time
	if err := b.db.QueryRow(b.ctx, `SELECT closed_at FROM usage_periods WHERE tenant_id = $1`, tenant).Scan(&closed); err != nil || closed != nil {
		t.Fatalf("an open window was closed before anything moved: %v %v", closed, err)
	}
	// The portal moves the anchor to now: the subscription's new period.
	anchor := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	if _, err := b.db.Exec(b.ctx, `UPDATE subscriptions SET current_period_start = $2, current_period_end = $3 WHERE id = $1`,
		sub, anchor, anchor.AddDate(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.ClosePeriods(b.ctx); err != nil {
		t.Fatal(err)
	}
	var used int64
	var end time.Time
	if err := b.db.QueryRow(b.ctx, `SELECT used, period_end, closed_at FROM usage_periods WHERE tenant_id = $1 AND period_start = $2`, tenant, oldStart).
		Scan(&used, &end, &closed); err != nil {
		t.Fatal(err)
	}
	if closed == nil || used != 42 || !end.Equal(anchor) {
		t.Fatalf("old window: used %d, end %s, closed %v; want 42, ended at the new anchor %s, closed", used, end, closed, anchor)
	}
}
