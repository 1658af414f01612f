package httpapi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// LimiterMetrics turns the limiter's hooks into Prometheus metrics: decisions
// by outcome and policy, Redis errors, fallbacks, near-cache hits and misses,
// refusals answered from the local refusal cache, invalidations.
type LimiterMetrics struct {
	decisions    *prometheus.CounterVec
	redisErrors  *prometheus.CounterVec
	fallbacks    *prometheus.CounterVec
	cache        *prometheus.CounterVec
	refusalCache *prometheus.CounterVec
	invalidation *prometheus.CounterVec
	redisWait    *prometheus.HistogramVec
	queueWait    *prometheus.HistogramVec
}

// NewLimiterMetrics registers the limiter's metrics on reg.
func NewLimiterMetrics(reg prometheus.Registerer) (*LimiterMetrics, error) {
	m := &LimiterMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_limiter_decisions_total",
			Help: "Limiter decisions by outcome (allowed, refused, shadow_refused) and refusing policy (none when allowed), and whether a fail mode decided (fallback: none, open, local).",
		}, []string{"outcome", "policy", "fallback"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_limiter_redis_errors_total",
			Help: "Failed or timed-out Redis calls of the limiter, by call (decide, snapshot, seed, release, subscribe, usage).",
		}, []string{"op"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_limiter_fallbacks_total",
			Help: "Policies decided by a fail mode while Redis was unreachable, by policy and mode (open, closed, local).",
		}, []string{"policy", "mode"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_limiter_snapshot_cache_total",
			Help: "Entitlement snapshot near-cache lookups by result (hit, miss).",
		}, []string{"result"}),
		refusalCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_limiter_refusal_cache_hits_total",
			Help: "Refusals answered from the local refusal cache without Redis, by policy.",
		}, []string{"policy"}),
		invalidation: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_limiter_invalidations_total",
			Help: "Snapshot invalidations received, by scope (tenant, all).",
		}, []string{"scope"}),
		// Redis's time apart from the process's own queue (issue 21): a
		// slow Redis and a busy instance call for different remedies.
		redisWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_limiter_redis_wait_seconds",
			Help:    "Time a limiter Redis call took once it had a connection (Redis and the network), by call.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"op"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_limiter_queue_wait_seconds",
			Help:    "Time a limiter Redis call waited in this process for a free connection, by call; past LIMITER_TIMEOUT the decision is shed with 503.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .025, .05},
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.redisErrors, m.fallbacks, m.cache, m.refusalCache, m.invalidation, m.redisWait, m.queueWait} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// The series an operator alerts on exist at 0 from the start, so that
	// rate() and absent() work before the first event.
	m.decisions.WithLabelValues("allowed", "none", "none")
	m.decisions.WithLabelValues("refused", keyspace.PolicyRate, "none")
	for _, op := range []string{"decide", "snapshot", "seed", "release", "subscribe", "usage"} {
		m.redisErrors.WithLabelValues(op)
	}
	for _, mode := range []limiter.FailMode{limiter.FailOpen, limiter.FailClosed, limiter.FailLocal} {
		m.fallbacks.WithLabelValues(keyspace.PolicyRate, string(mode))
		m.fallbacks.WithLabelValues(keyspace.DefaultMeter, string(mode))
	}
	m.cache.WithLabelValues("hit")
	m.cache.WithLabelValues("miss")
	m.refusalCache.WithLabelValues(keyspace.PolicyRate)
	m.invalidation.WithLabelValues("tenant")
	m.invalidation.WithLabelValues("all")
	return m, nil
}

// Hooks returns the limiter hooks feeding these metrics; pass them in
// limiter.Options.Hooks.
func (m *LimiterMetrics) Hooks() limiter.Hooks {
	hit, miss := m.cache.WithLabelValues("hit"), m.cache.WithLabelValues("miss")
	dq, dr := m.queueWait.WithLabelValues("decide"), m.redisWait.WithLabelValues("decide")
	return limiter.Hooks{
		OnDecision: func(_ string, d *limiter.Decision) {
			outcome, policy, fb := "allowed", "none", "none"
			switch {
			case d.Shadow:
				outcome, policy = "shadow_refused", d.Policy
			case !d.Allowed:
				outcome, policy = "refused", d.Policy
			}
			if d.Fallback != "" {
				fb = string(d.Fallback)
			}
			m.decisions.WithLabelValues(outcome, policy, fb).Inc()
		},
		OnRedisError: func(op string, _ error) { m.redisErrors.WithLabelValues(op).Inc() },
		OnFallback: func(policy string, mode limiter.FailMode) {
			m.fallbacks.WithLabelValues(policy, string(mode)).Inc()
		},
		OnRedisWait: func(op string, queued, wait time.Duration) {
			if op == "decide" { // the hot one: no label lookup
				dq.Observe(queued.Seconds())
				dr.Observe(wait.Seconds())
				return
			}
			m.queueWait.WithLabelValues(op).Observe(queued.Seconds())
			m.redisWait.WithLabelValues(op).Observe(wait.Seconds())
		},
		OnCacheHit:        hit.Inc,
		OnCacheMiss:       miss.Inc,
		OnRefusalCacheHit: func(policy string) { m.refusalCache.WithLabelValues(policy).Inc() },
		OnInvalidation: func(_ string, all bool) {
			scope := "tenant"
			if all {
				scope = "all"
			}
			m.invalidation.WithLabelValues(scope).Inc()
		},
	}
}
