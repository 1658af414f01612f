package main

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

// The worker's job metrics say what is stuck: a period left open past its
// end, reports Stripe refused, jobs waiting in River, a flush that fails.
func TestJobMetricsReportTheState(t *testing.T) {
	pool := pgtest.New(t)
	ctx := t.Context()
	var tenant string
	if err := pool.QueryRow(ctx, `
		WITH p AS (INSERT INTO plans (key, name) VALUES ('jm-plan', 'JM') RETURNING key)
		INSERT INTO tenants (name, plan_key) SELECT 'JM', key FROM p RETURNING id::text`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES
		  ($1, 'requests', now() - interval '40 days', now() - interval '10 days', 5),
		  ($1, 'exports', now() - interval '40 days', now() - interval '10 days', 5),
		  ($1, 'requests', now() - interval '10 days', now() + interval '20 days', 5)`, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO stripe_meter_reports (identifier, tenant_id, meter, event_name, period_start, quantity, status) VALUES
		  ('a', $1, 'requests', 'api_requests', now() - interval '40 days', 5, 'failed'),
		  ('b', $1, 'requests', 'api_requests', now() - interval '40 days', 5, 'sent'),
		  ('c', $1, 'requests', 'api_requests', now() - interval '40 days', 5, 'sent')`, tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, finalized_at)
		VALUES ('{}', 'stripe_event', 25, 'default', 'available', 1, NULL), ('{}', 'stripe_event', 25, 'default', 'available', 1, NULL),
		       ('{}', 'stripe_event', 25, 'default', 'retryable', 1, NULL), ('{}', 'prune', 25, 'default', 'completed', 1, now())`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := newJobMetrics(reg, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.onFlush(metering.FlushStats{Units: 7}, nil)
	m.onFlush(metering.FlushStats{}, errTest)
	for name, want := range map[string]float64{
		`tollgate_usage_periods_overdue`:                                             2,
		`tollgate_stripe_meter_reports{status="failed"}`:                             1,
		`tollgate_stripe_meter_reports{status="sent"}`:                               2,
		`tollgate_stripe_meter_reports{status="pending"}`:                            0,
		`tollgate_river_jobs{kind="stripe_event",queue="default",state="available"}`: 2,
		`tollgate_river_jobs{kind="stripe_event",queue="default",state="retryable"}`: 1,
		`tollgate_usage_flush_passes_total{result="ok"}`:                             1,
		`tollgate_usage_flush_passes_total{result="error"}`:                          1,
		`tollgate_usage_flush_units_total`:                                           7,
	} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if lag := gathered(t, reg, "tollgate_usage_flush_lag_seconds"); lag < 0 || lag > 5 {
		t.Errorf("flush lag %v s right after a good pass", lag)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "tollgate_river_jobs" && len(mf.GetMetric()) != 2 {
			t.Errorf("%d river series, want 2 (completed jobs are not queued)", len(mf.GetMetric()))
		}
	}
}

type testErr string

func (e testErr) Error() string { return string(e) }

const errTest = testErr("flush failed")

// gathered returns the value of one series, written as in the text format.
func gathered(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			if len(m.GetLabel()) > 0 {
				name += "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						name += ","
					}
					name += l.GetName() + `="` + l.GetValue() + `"`
				}
				name += "}"
			}
			if name != series {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}
