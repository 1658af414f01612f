package entitlements_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// WriteAndPublish is the only way billing writes tenants: a write that changes a
// tenant bumps its version in the same transaction and publishes it after
// the commit; a write that changes nothing bumps nothing; a failed fn
// changes nothing at all.
func TestUpdateBumpsAndPublishesWhatChanged(t *testing.T) {
	b := setup(t)
	pro := b.mustPlan(t, catalogue.PlanInput{Key: uniq("pro"), StripePriceID: uniq("price_pro"),
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}}})
	tn := b.mustTenant(t, b.free)
	v0 := tn.EntitlementVersion
	cus := uniq("cus")
	snaps, err := b.svc.WriteAndPublish(b.ctx, func(ctx context.Context, w *entitlements.Writes) error {
		w.Reason("test: link and upgrade")
		if plan, err := catalogue.PlanForItem(ctx, w.Tx(), pro.StripePriceID, ""); err != nil || plan != pro.Key {
			t.Errorf("PlanForItem = %q, %v", plan, err)
		}
		if ok, err := w.LinkCustomer(ctx, tn.ID, cus); err != nil || !ok {
			t.Errorf("LinkCustomer = %v, %v", ok, err)
		}
		if _, err := w.SetPlan(ctx, tn.ID, pro.Key); err != nil {
			return err
		}
		_, err := w.SetStripeFeatures(ctx, tn.ID, []string{"sso", "exports", "sso"})
		return err
	})
	if err != nil || len(snaps) != 1 || snaps[0].Version != v0+1 || snaps[0].Plan != pro.Key {
		t.Fatalf("Update = %+v, %v; want one snapshot at version %d on %s", snaps, err, v0+1, pro.Key)
	}
	cached, ok, err := b.store.Snapshot(b.ctx, tn.ID)
	if err != nil || !ok || cached.Version != v0+1 {
		t.Fatalf("published snapshot %+v ok %v err %v", cached, ok, err)
	}
	got, _ := b.svc.GetTenantRow(b.ctx, tn.ID)
	if got.StripeCustomerID != cus || len(got.StripeFeatures) != 2 {
		t.Fatalf("tenant after Update: %+v", got)
	}
	// The same writes again change nothing: no new version.
	snaps, err = b.svc.WriteAndPublish(b.ctx, func(ctx context.Context, w *entitlements.Writes) error {
		if changed, err := w.SetPlan(ctx, tn.ID, pro.Key); err != nil || changed {
			t.Errorf("SetPlan again = %v, %v", changed, err)
		}
		if changed, err := w.SetStripeFeatures(ctx, tn.ID, []string{"exports", "sso"}); err != nil || changed {
			t.Errorf("SetStripeFeatures again = %v, %v", changed, err)
		}
		if ok, err := w.LinkCustomer(ctx, tn.ID, cus); err != nil || !ok {
			t.Errorf("LinkCustomer again = %v, %v", ok, err)
		}
		return nil
	})
	if err != nil || len(snaps) != 0 {
		t.Fatalf("no-op Update = %+v, %v", snaps, err)
	}
	// A customer linked elsewhere is not moved.
	other := b.mustTenant(t, b.free)
	_, _ = b.svc.WriteAndPublish(b.ctx, func(ctx context.Context, w *entitlements.Writes) error {
		if ok, err := w.LinkCustomer(ctx, other.ID, cus); err != nil || ok {
			t.Errorf("linking another tenant's customer = %v, %v", ok, err)
		}
		return nil
	})
	// A failing fn rolls everything back.
	boom := errors.New("boom")
	if _, err := b.svc.WriteAndPublish(b.ctx, func(ctx context.Context, w *entitlements.Writes) error {
		if _, err := w.UnlinkCustomer(ctx, cus); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update with a failing fn = %v", err)
	}
	if got, _ := b.svc.GetTenantRow(b.ctx, tn.ID); got.StripeCustomerID == "" || got.EntitlementVersion != v0+1 {
		t.Fatalf("a failed Update changed the tenant: %+v", got)
	}
	// Unlinking drops the customer and its features, with a new version.
	snaps, err = b.svc.WriteAndPublish(b.ctx, func(ctx context.Context, w *entitlements.Writes) error {
		id, err := w.UnlinkCustomer(ctx, cus)
		if id != tn.ID {
			t.Errorf("UnlinkCustomer = %q", id)
		}
		return err
	})
	if got, _ := b.svc.GetTenantRow(b.ctx, tn.ID); err != nil || len(snaps) != 1 || got.StripeCustomerID != "" || len(got.StripeFeatures) != 0 {
		t.Fatalf("unlink: %+v %v %+v", snaps, err, got)
	}
}
