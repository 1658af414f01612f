package entitlements_test

import (
	"testing"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
)

// PurgePlan deletes a throwaway plan with its tenants and their keys, and
// nothing of another plan's.
func TestPurgePlanDeletesThePlanAndItsTenants(t *testing.T) {
	b := setup(t)
	seeded, kept := uniq("seeded"), uniq("kept")
	b.mustPlan(t, catalogue.PlanInput{Key: seeded})
	b.mustPlan(t, catalogue.PlanInput{Key: kept})
	a, c := b.mustTenant(t, seeded), b.mustTenant(t, seeded)
	other := b.mustTenant(t, kept)
	// The key's row goes with its tenant (ON DELETE CASCADE).
	if _, err := credentials.New(b.pool, b.svc, nil, credentials.Options{}).IssueKey(b.ctx, a.ID, "bench"); err != nil {
		t.Fatal(err)
	}
	n, err := b.svc.PurgePlan(b.ctx, seeded)
	if err != nil || n != 2 {
		t.Fatalf("PurgePlan = %d, %v; want 2 tenants", n, err)
	}
	for _, id := range []string{a.ID, c.ID} {
		if _, err := b.svc.GetTenantRow(b.ctx, id); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("tenant %s after the purge: %v", id, err)
		}
	}
	if _, err := b.cat.GetPlan(b.ctx, seeded); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("plan after the purge: %v", err)
	}
	if _, err := b.svc.GetTenantRow(b.ctx, other.ID); err != nil {
		t.Errorf("another plan's tenant: %v", err)
	}
	if n, err := b.svc.PurgePlan(b.ctx, seeded); err != nil || n != 0 {
		t.Fatalf("purging it again = %d, %v", n, err)
	}
}
