package metering

import (
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Usage events older than the cutoff go, in batches (more than one batch
// here), and nothing newer does; the period's figure stays.
func TestPruneUsageEventsDeletesOnlyOlderRows(t *testing.T) {
	// Not parallel: retention prunes the whole database.
	b := setup(t)
	now := time.Now()
	tenant := b.newTenant(t, now.Add(-24*time.Hour))
	old := postgres.RetentionBatch + 3
	if _, err := b.db.Exec(b.ctx, `
INSERT INTO usage_events (tenant_id, idempotency_key, meter, quantity, occurred_at, period_start, received_at)
SELECT $1, 'old-' || i, 'exports', 1, $2, $2, $2 FROM generate_series(1, $3) i`, tenant, now.Add(-100*24*time.Hour), old); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `
INSERT INTO usage_events (tenant_id, idempotency_key, meter, quantity, occurred_at, period_start, received_at)
VALUES ($1, 'new-1', 'exports', 1, $2, $2, $2), ($1, 'edge', 'exports', 1, $3, $3, $3)`,
		tenant, now, now.Add(-89*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(b.ctx, `INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, 'exports', $2, $3, 42)`,
		tenant, now.Add(-100*24*time.Hour), now.Add(-70*24*time.Hour)); err != nil {
		t.Fatal(err)
	}

	n, err := b.svc.PruneUsageEvents(b.ctx, now.Add(-90*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(old) {
		t.Fatalf("pruned %d rows, want %d (every old one, over more than one batch)", n, old)
	}
	if left := b.count(t, `SELECT count(*) FROM usage_events WHERE tenant_id = $1`, tenant); left != 2 {
		t.Fatalf("%d events left, want the 2 received after the cutoff", left)
	}
	if used := b.count(t, `SELECT used FROM usage_periods WHERE tenant_id = $1`, tenant); used != 42 {
		t.Fatalf("period figure %d after pruning, want 42 (pruning events never changes usage)", used)
	}
	if n, err := b.svc.PruneUsageEvents(b.ctx, now.Add(-90*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v; want 0, nil", n, err)
	}
}
