package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// jobMetrics are the worker's metrics of its metering jobs: how far the
// flush of the limiter's counters lags, periods closed, Stripe meter
// reports and River's queue. Flush figures are this process's own (every
// worker flushes); the rest is read from Postgres at scrape time, so every
// worker shows the same, whichever of them ran the job.
type jobMetrics struct {
	flushes     *prometheus.CounterVec
	flushUnits  prometheus.Counter
	flushStale  prometheus.Counter
	lastFlushOK atomic.Int64 // unix nanoseconds of the last pass without error
	closed      prometheus.Counter
	// rescuedJobs counts the jobs this worker freed from dead workers.
	rescuedJobs *prometheus.CounterVec
}

func newJobMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, log *slog.Logger) (*jobMetrics, error) {
	m := &jobMetrics{
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_usage_flush_passes_total",
			Help: "Passes of the flush of limiter counters to Postgres, by result (ok or error).",
		}, []string{"result"}),
		flushUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_usage_flush_units_total",
			Help: "Usage units this worker's flush added to Postgres.",
		}),
		flushStale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_usage_flush_stale_claims_total",
			Help: "Claims this worker's flush found behind Postgres (a Redis replica promoted after losing writes): not counted, their counters raised to Postgres's figure.",
		}),
		closed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_usage_periods_closed_total",
			Help: "Usage periods this worker closed.",
		}),
		rescuedJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_river_jobs_rescued_total",
			Help: "Jobs left running by a worker that stopped beating (killed), made available again by this worker, by kind.",
		}, []string{"kind"}),
	}
	m.flushes.WithLabelValues("ok")            // both series exist from the start
	m.flushes.WithLabelValues("error")         // (alerts on a rate need them)
	m.lastFlushOK.Store(time.Now().UnixNano()) // lag counts from the start
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tollgate_usage_flush_lag_seconds",
		Help: "Seconds since this worker's last flush pass that succeeded: how far Postgres may be behind Redis (alert when it grows beyond a few flush intervals).",
	}, func() float64 { return time.Since(time.Unix(0, m.lastFlushOK.Load())).Seconds() })
	for _, c := range []prometheus.Collector{m.flushes, m.flushUnits, m.flushStale, m.closed, m.rescuedJobs, lag, newStateCollector(pool, log)} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// rescued is the heartbeat's Rescued hook.
func (m *jobMetrics) rescued(kind string) { m.rescuedJobs.WithLabelValues(kind).Inc() }

// onFlush is metering's OnFlush hook.
func (m *jobMetrics) onFlush(st metering.FlushStats, err error) {
	if err != nil {
		m.flushes.WithLabelValues("error").Inc()
		return
	}
	m.flushes.WithLabelValues("ok").Inc()
	m.flushUnits.Add(float64(st.Units))
	m.flushStale.Add(float64(st.Stale))
	m.lastFlushOK.Store(time.Now().UnixNano())
}

// closePeriodsWorker is metering's ClosePeriodsWorker, counting what it
// closed.
type closePeriodsWorker struct {
	river.WorkerDefaults[metering.ClosePeriodsArgs]
	svc *metering.Service
	m   *jobMetrics
}

func (w *closePeriodsWorker) Work(ctx context.Context, _ *river.Job[metering.ClosePeriodsArgs]) error {
	n, err := w.svc.ClosePeriods(ctx)
	w.m.closed.Add(float64(n))
	return err
}

// stateCollector reads, at scrape time, River's queue depth, the usage
// periods left open past their end, and the Stripe meter reports by status.
type stateCollector struct {
	pool    *pgxpool.Pool
	meter   *metering.Service // reads only: periods and reports are metering's
	log     *slog.Logger
	jobs    *prometheus.Desc
	overdue *prometheus.Desc
	reports *prometheus.Desc
}

func newStateCollector(pool *pgxpool.Pool, log *slog.Logger) *stateCollector {
	return &stateCollector{pool: pool, log: log, meter: metering.NewService(pool, nil, log, metering.Options{}),
		jobs: prometheus.NewDesc("tollgate_river_jobs",
			"River jobs not finished, by queue, kind and state (available, scheduled, retryable, running); read from Postgres at scrape time.",
			[]string{"queue", "kind", "state"}, nil),
		overdue: prometheus.NewDesc("tollgate_usage_periods_overdue",
			"Usage periods that ended more than 10 minutes ago and are still open (the close job is not running).", nil, nil),
		reports: prometheus.NewDesc("tollgate_stripe_meter_reports",
			"Usage reports to Stripe Billing Meters by status (pending, sent, failed).", []string{"status"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.overdue
	ch <- c.reports
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	depths, err := jobs.ReadQueueDepth(ctx, c.pool)
	if err != nil {
		c.log.Warn("river queue depth not read", "err", err)
	}
	for _, d := range depths {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(d.Jobs), d.Queue, d.Kind, d.State)
	}
	b, err := c.meter.ReadBacklog(ctx)
	if err != nil {
		c.log.Warn("metering backlog not read", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.overdue, prometheus.GaugeValue, float64(b.OverduePeriods))
	for st, n := range b.Reports {
		ch <- prometheus.MustNewConstMetric(c.reports, prometheus.GaugeValue, float64(n), st)
	}
}
