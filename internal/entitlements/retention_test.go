package entitlements_test

import (
	"testing"
	"time"
)

// Old versions go, except each tenant's latest, whatever its age.
func TestPruneVersionsKeepsEachTenantsLatest(t *testing.T) {
	b := setup(t)
	aged, mixed := b.mustTenant(t, b.free), b.mustTenant(t, b.free)
	for _, id := range []string{aged.ID, aged.ID, mixed.ID} {
		if _, err := b.svc.BumpAndPublish(b.ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// aged: versions 1..3 all 200 days old; mixed: 1 old, 2 new.
	if _, err := b.pool.Exec(b.ctx, `UPDATE entitlement_versions SET created_at = now() - interval '200 days'
		WHERE tenant_id = $1 OR (tenant_id = $2 AND version = 1)`, aged.ID, mixed.ID); err != nil {
		t.Fatal(err)
	}
	n, err := b.svc.PruneVersions(b.ctx, time.Now().Add(-180*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("pruned %d versions, want 3 (aged 1 and 2, mixed 1)", n)
	}
	for tenant, want := range map[string][]int64{aged.ID: {3}, mixed.ID: {2}} {
		rows, err := b.pool.Query(b.ctx, `SELECT version FROM entitlement_versions WHERE tenant_id = $1 ORDER BY version`, tenant)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if rows.Err() != nil || len(got) != len(want) || got[0] != want[0] {
			t.Errorf("tenant %s keeps versions %v, want %v", tenant, got, want)
		}
	}
}

// Expired overrides go once past the retention and once their expiry took
// effect (a version made after it); live, recent and not-yet-applied
// expiries stay.
func TestPruneExpiredOverrides(t *testing.T) {
	b := setup(t)
	applied, pending := b.mustTenant(t, b.free), b.mustTenant(t, b.free)
	now := time.Now()
	expired := now.Add(-40 * 24 * time.Hour)
	insert := func(tenant string, expires *time.Time) string {
		t.Helper()
		var id string
		if err := b.pool.QueryRow(b.ctx, `INSERT INTO quota_overrides (tenant_id, meter, extra, expires_at) VALUES ($1, 'requests', 5, $2) RETURNING id`,
			tenant, expires).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	recent := now.Add(-10 * 24 * time.Hour)
	gone := insert(applied.ID, &expired)
	keep := map[string]string{
		insert(applied.ID, &recent):  "expired 10 days ago (inside the retention)",
		insert(applied.ID, nil):      "never expires",
		insert(pending.ID, &expired): "expired, but no version since: its expiry has not taken effect",
	}
	// applied's only version is from its creation (now, after the expiry);
	// pending's is made to predate the expiry.
	if _, err := b.pool.Exec(b.ctx, `UPDATE entitlement_versions SET created_at = $2 WHERE tenant_id = $1`, pending.ID, expired.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	n, err := b.svc.PruneExpiredOverrides(b.ctx, now.Add(-30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("pruned %d overrides, want 1", n)
	}
	var left int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM quota_overrides WHERE id = $1`, gone).Scan(&left); err != nil || left != 0 {
		t.Errorf("the applied, 40-day-old expired override is still there (%d, %v)", left, err)
	}
	for id, why := range keep {
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM quota_overrides WHERE id = $1`, id).Scan(&left); err != nil || left != 1 {
			t.Errorf("override that %s was pruned (%v)", why, err)
		}
	}
}
