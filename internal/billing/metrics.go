package billing

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	webhook   *prometheus.CounterVec // type, outcome
	processed *prometheus.CounterVec // type, status
	failures  *prometheus.CounterVec // type
	lag       prometheus.Histogram   // received → applied
	drift     *prometheus.CounterVec // field
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
		m.drift, err = register(reg, m.drift)
	}
	if err != nil {
		return nil, err
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
