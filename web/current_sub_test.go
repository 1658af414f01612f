package web

import (
	"testing"
	"time"
)

// The console shows the subscription the limiter enforces: with an older
// active subscription and a newer canceled one, that is the active one
// (the view current_subscriptions). in the tenant page's subscription,
// its status, and the tenant list.
func TestConsoleShowsTheEnforcedSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Two subs", b.pro)
	now := time.Now()
	for _, s := range []struct {
		id, status string
		at         time.Time
	}{{"sub_active_" + tn.ID[:8], "active", now.Add(-time.Hour)}, {"sub_canceled_" + tn.ID[:8], "canceled", now}} {
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, updated_at) VALUES ($1, $2, 'cus_two', $3, $4)`,
			s.id, tn.ID, s.status, s.at); err != nil {
			t.Fatal(err)
		}
	}
	st := b.web.store
	sub, err := st.subscription(b.ctx, tn.ID)
	if err != nil || sub == nil || sub.Status != "active" {
		t.Fatalf("subscription = %+v, %v; want the active one", sub, err)
	}
	row, err := st.tenant(b.ctx, tn.ID)
	if err != nil || row.SubStatus != "active" {
		t.Fatalf("tenant status = %q, %v; want active", row.SubStatus, err)
	}
	list, _, err := st.tenantPage(b.ctx, tn.ID, 1, 10)
	if err != nil || len(list) != 1 || list[0].SubStatus != "active" {
		t.Fatalf("tenant list = %+v, %v; want one row with status active", list, err)
	}
}
