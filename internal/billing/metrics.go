package billing

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	webhook   *prometheus.CounterVec // type, outcome
	processed *prometheus.CounterVec // type, status
	failures  *prometheus.CounterVec // type
	lag       prometheus.Histogram   // received → applied
	drift     *prometheus.CounterVec // field
	// creditSkipped: Stripe credit grants not mirrored, by reason.
	creditSkipped *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		webhook: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_stripe_webhook_events_total",
			Help: "Stripe webhook deliveries by event type and outcome (stored, duplicate, ignored_api_version, rejected, too_large, unavailable).",
		}, []string{"type", "outcome"}),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_stripe_events_processed_total",
			Help: "Stripe events applied by the worker, by type and resulting status (processed, ignored, failed).",
		}, []string{"type", "status"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_stripe_event_failures_total",
			Help: "Failed attempts at applying a Stripe event (each retry counts).",
		}, []string{"type"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_stripe_event_processing_lag_seconds",
			Help:    "Time from a Stripe event's receipt to its effect being committed.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_stripe_drift_repairs_total",
			Help: "Differences from Stripe repaired by resync, by field.",
		}, []string{"field"}),
		creditSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_stripe_credit_grants_skipped_total",
			Help: "Stripe credit grant events acknowledged without a grant, by reason (unknown_customer, currency, unmapped_price, not_monetary, scope, no_secret_key, tollgate_meter, too_small, bad_payload, credits_off).",
		}, []string{"reason"}),
	}
	var err error
	m.webhook, err = register(reg, m.webhook)
	if err == nil {
		m.processed, err = register(reg, m.processed)
	}
	if err == nil {
		m.failures, err = register(reg, m.failures)
	}
	if err == nil {
		m.lag, err = register(reg, m.lag)
	}
	if err == nil {
		m.creditSkipped, err = register(reg, m.creditSkipped)
	}
	if err == nil {
		m.drift, err = register(reg, m.drift)
	}
	if err != nil {
		return nil, err
	}
	// Series at 0 from the start (absent() and rate() work before the
	// first event); the type label of these is "other".
	for _, o := range []string{"stored", "duplicate", "ignored_api_version", "rejected", "too_large", "unavailable"} {
		m.webhook.WithLabelValues("other", o)
	}
	for _, st := range []string{StatusProcessed, StatusIgnored, StatusFailed} {
		m.processed.WithLabelValues("other", st)
	}
	m.failures.WithLabelValues("other")
	m.drift.WithLabelValues("plan")
	for _, r := range creditSkipReasons {
		m.creditSkipped.WithLabelValues(r)
	}
	return m, nil
}

// knownTypes bounds the type label: anything else is "other".
var knownTypes = map[string]bool{
	"checkout.session.completed":                      true,
	"customer.subscription.created":                   true,
	"customer.subscription.updated":                   true,
	"customer.subscription.deleted":                   true,
	"customer.subscription.paused":                    true,
	"customer.subscription.resumed":                   true,
	"customer.subscription.trial_will_end":            true,
	"invoice.paid":                                    true,
	"invoice.payment_failed":                          true,
	"invoice.created":                                 true,
	"entitlements.active_entitlement_summary.updated": true,
	"customer.deleted":                                true,
	"product.updated":                                 true,
	"price.updated":                                   true,
	"billing.credit_grant.created":                    true,
	"billing.credit_grant.updated":                    true,
}

func typeLabel(t string) string {
	if knownTypes[t] {
		return t
	}
	return "other"
}

// register registers c, or returns the collector already registered under
// its name: api and worker may share a registry (in tests, one process).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// backlogCollector reports the stored events by status and the age of the
// oldest pending one. The worker's own counters live in the worker process;
// these come from Postgres, so any api instance's /metrics shows a stuck
// queue or failed events (alert on failed > 0, or on the oldest pending
// event growing old). A scrape never waits on Postgres: it reports the last
// reading and, when that is older than backlogEvery, starts a new one in
// the background, so scrapes (however many, however often) cost at most
// two small queries per backlogEvery per instance (the first scrape of a
// process waits for its reading).
type backlogCollector struct {
	s      *Service
	events *prometheus.Desc
	oldest *prometheus.Desc

	mu        sync.Mutex
	read      time.Time // when the last reading finished (zero: none yet)
	counts    map[string]float64
	oldestAt  *time.Time
	reading   bool
	readCount atomic.Int64
}

// backlogEvery is how stale the backlog figures may get.
const backlogEvery = 15 * time.Second

func newBacklogCollector(s *Service) *backlogCollector {
	return &backlogCollector{
		s: s,
		events: prometheus.NewDesc("tollgate_stripe_events",
			"Stored Stripe events by status (read from Postgres at most every 15s, in the background).", []string{"status"}, nil),
		oldest: prometheus.NewDesc("tollgate_stripe_oldest_pending_event_age_seconds",
			"Age of the oldest pending Stripe event (0 when none is pending).", nil, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.oldest
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	first := c.read.IsZero() && !c.reading
	stale := time.Since(c.read) > backlogEvery
	if stale && !c.reading {
		c.reading = true
		if first {
			// The first scrape waits for one reading rather than report
			// nothing; later ones never wait.
			c.mu.Unlock()
			c.refresh()
			c.mu.Lock()
		} else {
			go c.refresh()
		}
	}
	counts, oldest, read := c.counts, c.oldestAt, c.read
	c.mu.Unlock()
	if read.IsZero() {
		return // nothing read yet: absent beats a made-up 0
	}
	for st, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, v, st)
	}
	age := 0.0
	if oldest != nil {
		age = c.s.opts.Now().Sub(*oldest).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}

// refresh reads the backlog once.
func (c *backlogCollector) refresh() {
	c.readCount.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts := map[string]float64{StatusPending: 0, StatusProcessed: 0, StatusIgnored: 0, StatusFailed: 0}
	var oldest *time.Time
	err := func() error {
		rows, err := c.s.db.Query(ctx, `SELECT status, count(*) FROM stripe_events GROUP BY status`)
		if err != nil {
			return err
		}
		var status string
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { counts[status] = float64(n); return nil }); err != nil {
			return err
		}
		return c.s.db.QueryRow(ctx, `SELECT min(received_at) FROM stripe_events WHERE status = 'pending'`).Scan(&oldest)
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = false
	if err != nil {
		c.s.log.Warn("stripe event backlog not read", "err", err)
		return
	}
	c.counts, c.oldestAt, c.read = counts, oldest, time.Now()
}
