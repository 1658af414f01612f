package billing_test

import (
	"testing"
	"time"
)

// Processed and ignored events older than the cutoff go; pending and
// failed ones stay whatever their age, and so does anything newer.
func TestPruneEventsKeepsUnfinishedAndRecent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{noWorker: true})
	now := time.Now()
	old, recent := now.Add(-100*24*time.Hour), now.Add(-10*24*time.Hour)
	rows := []struct {
		status string
		at     time.Time
		gone   bool
	}{
		{"processed", old, true},
		{"ignored", old, true},
		{"pending", old, false},
		{"failed", old, false},
		{"processed", recent, false},
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = newEventID(t)
		if _, err := e.pool.Exec(t.Context(), `
INSERT INTO stripe_events (id, type, event_created, received_at, payload, status)
VALUES ($1, 'customer.subscription.updated', $2, $2, '{}', $3)`, ids[i], r.at, r.status); err != nil {
			t.Fatal(err)
		}
	}
	n, err := e.svc.PruneEvents(t.Context(), now.Add(-90*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("pruned %d events, want 2", n)
	}
	for i, r := range rows {
		var left int
		if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM stripe_events WHERE id = $1`, ids[i]).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if (left == 0) != r.gone {
			t.Errorf("%s event received %s: present=%v, want gone=%v", r.status, r.at.Format(time.DateOnly), left == 1, r.gone)
		}
	}
}
