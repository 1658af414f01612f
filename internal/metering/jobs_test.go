package metering

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
)

func TestJobWorkers(t *testing.T) {
	// Not parallel: the jobs run passes over the whole database.
	b := setup(t)
	b.svc.opts.CloseGrace = time.Millisecond
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	// A period that ended an hour ago, still open.
	start, end := time.Now().Add(-40*24*time.Hour).Truncate(time.Second), time.Now().Add(-time.Hour).Truncate(time.Second)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES ($1, 'requests', $2, $3, 9)`, tenant, start, end); err != nil {
		t.Fatal(err)
	}
	if err := (&ClosePeriodsWorker{Service: b.svc}).Work(b.ctx, &river.Job[ClosePeriodsArgs]{}); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM usage_periods WHERE tenant_id = $1 AND closed_at IS NOT NULL AND used = 9`, tenant); n != 1 {
		t.Fatalf("closed periods = %d, want 1 with its figure", n)
	}

	calls := 0
	w := &ExpireOverridesWorker{Refresh: func(context.Context) (int, error) { calls++; return 0, nil }}
	if err := w.Work(b.ctx, &river.Job[ExpireOverridesArgs]{}); err != nil || calls != 1 {
		t.Fatalf("expire overrides: %v, %d calls", err, calls)
	}

	// A pass with a failed send fails the job (River shows and retries it).
	plan := "p" + randHex(6)
	b.db.Exec(b.ctx, `INSERT INTO plans (key, name) VALUES ($1, $1)`, plan)
	b.db.Exec(b.ctx, `INSERT INTO plan_quotas (plan_key, meter, quota_limit, mode, stripe_meter_event, stripe_report) VALUES ($1, 'exports', 1, 'soft', 'ev', 'total')`, plan)
	b.db.Exec(b.ctx, `UPDATE tenants SET plan_key = $2, stripe_customer_id = $3 WHERE id = $1`, tenant, plan, "cus_"+randHex(5))
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("j1", "exports", 2, time.Now())}); err != nil {
		t.Fatal(err)
	}
	sw := &StripeReportWorker{Service: b.svc, Sender: &recordingSender{fail: true}}
	if err := sw.Work(b.ctx, &river.Job[StripeReportArgs]{}); err == nil {
		t.Fatal("a failed send did not fail the job")
	}
	for _, p := range []*river.PeriodicJob{ClosePeriodsPeriodic(), ExpireOverridesPeriodic(), StripeReportPeriodic()} {
		if p == nil {
			t.Fatal("nil periodic job")
		}
	}
}
