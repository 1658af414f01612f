package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
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
	m.onFlush(metering.FlushStats{Units: 7, Stale: 2}, nil)
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
		`tollgate_usage_flush_stale_claims_total`:                                    2,
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

// The close job's counter says how many periods it closed: the periods
// ended (past the grace) are counted once, the current one is not.
func TestClosePeriodsCountsThePeriodsItClosed(t *testing.T) {
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	m, err := newJobMetrics(reg, pool, log)
	if err != nil {
		t.Fatal(err)
	}
	svc := metering.NewService(pool, limitstore.New(rdb, prefix), log, metering.Options{})
	var tenant string
	if err := pool.QueryRow(ctx, `
		WITH p AS (INSERT INTO plans (key, name) VALUES ('jm-close-plan', 'JM close') ON CONFLICT (key) DO UPDATE SET name = EXCLUDED.name RETURNING key)
		INSERT INTO tenants (name, plan_key) SELECT 'JM close', key FROM p RETURNING id::text`).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO usage_periods (tenant_id, meter, period_start, period_end, used) VALUES
		  ($1, 'requests', now() - interval '60 days', now() - interval '30 days', 5),
		  ($1, 'requests', now() - interval '30 days', now() - interval '2 minutes', 5),
		  ($1, 'exports', now() - interval '30 days', now() - interval '2 minutes', 1),
		  ($1, 'requests', now() - interval '2 minutes', now() + interval '30 days', 5)`, tenant); err != nil {
		t.Fatal(err)
	}
	// Other tests of the package may have left ended periods open: the
	// job closes those too, and counts them.
	var ended int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_periods WHERE closed_at IS NULL AND period_end <= now() - interval '1 minute'`).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	w := &closePeriodsWorker{svc: svc, m: m}
	if err := w.Work(ctx, &river.Job[metering.ClosePeriodsArgs]{}); err != nil {
		t.Fatal(err)
	}
	if got := gathered(t, reg, "tollgate_usage_periods_closed_total"); got != float64(ended) || ended < 3 {
		t.Fatalf("periods closed %v, want the %d ended ones", got, ended)
	}
	var open int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM usage_periods WHERE tenant_id = $1 AND closed_at IS NULL`, tenant).Scan(&open); err != nil || open != 1 {
		t.Fatalf("%d of the tenant's periods open (%v), want the current one", open, err)
	}
	// Nothing more to close: the counter stays.
	if err := w.Work(ctx, &river.Job[metering.ClosePeriodsArgs]{}); err != nil {
		t.Fatal(err)
	}
	if got := gathered(t, reg, "tollgate_usage_periods_closed_total"); got != float64(ended) {
		t.Fatalf("periods closed %v after a pass with nothing to close, want %d", got, ended)
	}
}

// The flush lag is the alert on a flusher that cannot reach Redis: it
// grows while every pass fails and falls back once one succeeds.
func TestFlushLagGrowsWhileRedisIsUnreachableAndFallsAfterAGoodPass(t *testing.T) {
	pool := pgtest.New(t)
	_, prefix := redistest.New(t) // skips without Redis; cleans the prefix
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	// Redis is unreachable for the flusher until up is set: no connection
	// is made before, so none survives from a good time.
	var up atomic.Bool
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !up.Load() {
			return nil, errors.New("redis unreachable (test)")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	opt.MaxRetries = -1 // a failing pass fails at once, not after backoffs
	rdb := redis.NewClient(opt)
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	m, err := newJobMetrics(reg, pool, log)
	if err != nil {
		t.Fatal(err)
	}
	svc := metering.NewService(pool, limitstore.New(rdb, prefix), log, metering.Options{OnFlush: m.onFlush})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunFlusher(ctx, 20*time.Millisecond, nil) }()
	t.Cleanup(func() { cancel(); <-done; rdb.Close() })

	lag := func() float64 { return gathered(t, reg, "tollgate_usage_flush_lag_seconds") }
	passes := func(result string) float64 {
		return gathered(t, reg, `tollgate_usage_flush_passes_total{result="`+result+`"}`)
	}
	testkit.Eventually(t, 20*time.Second, "the flush lag grows past 1 s while every pass fails", func() bool {
		return passes("error") >= 3 && lag() > 1
	})
	if ok := passes("ok"); ok != 0 {
		t.Fatalf("%v good passes with Redis unreachable", ok)
	}
	up.Store(true)
	testkit.Eventually(t, 20*time.Second, "the flush lag falls under 0.5 s after a good pass", func() bool {
		return passes("ok") >= 1 && lag() < 0.5
	})
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
