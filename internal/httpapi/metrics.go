package httpapi

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// overloaded counts requests shed by the process-wide cap (MAX_IN_FLIGHT).
	overloaded prometheus.Counter

	// series holds the counter and histogram of each label set met, so
	// that a request does not hash its labels into both vectors again
	// (two WithLabelValues were 1–2% of the api's CPU under POST
	// /v1/check). Copied on write: the label sets are bounded (routes,
	// known methods, statuses) and soon all known.
	seriesMu sync.Mutex
	series   atomic.Pointer[map[seriesKey]series]
}

type seriesKey struct {
	route, method string
	status        int
}

type series struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// seriesOf returns the metrics of one label set.
func (m *httpMetrics) seriesOf(route, method string, status int) series {
	k := seriesKey{route, method, status}
	if p := m.series.Load(); p != nil {
		if s, ok := (*p)[k]; ok {
			return s
		}
	}
	st := strconv.Itoa(status)
	s := series{m.requests.WithLabelValues(route, method, st), m.duration.WithLabelValues(route, method, st)}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	old := m.series.Load()
	next := make(map[seriesKey]series, 1)
	if old != nil {
		next = make(map[seriesKey]series, len(*old)+1)
		for k, v := range *old {
			next[k] = v
		}
	}
	next[k] = s
	m.series.Store(&next)
	return s
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tollgate_http_request_duration_seconds", Help: "HTTP request latency by route, method and status.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method", "status"}),
		overloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_http_overloaded_total", Help: "Requests answered 503 because this process was overloaded: over the adaptive limit on decisions in progress (at most MAX_IN_FLIGHT), or no Redis connection free within LIMITER_TIMEOUT.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.overloaded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// knownMethods bound the method label: any other method (anyone can send
// "FOO /") is "other", so that made-up methods cannot add series.
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true,
}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	return "other"
}

// routeLabel is the route template, never the raw path; the catch-alls that
// answer unknown paths (and a request no route matched) are "unmatched".
func routeLabel(route string, status int) string {
	if route == "" || route == "/*" || strings.HasSuffix(route, "/*") && status >= 400 {
		return "unmatched"
	}
	return route
}

// initRoutes creates the requests counter of every registered route at 0
// (status 200), so that the series exist before the first request.
func (m *httpMetrics) initRoutes(routes []*echo.Route) {
	for _, r := range routes {
		if strings.HasSuffix(r.Path, "/*") || !knownMethods[r.Method] {
			continue
		}
		m.requests.WithLabelValues(r.Path, r.Method, "200")
	}
}

// observe records every request by its route template and a known method,
// so that neither ids in URLs nor made-up paths and methods grow the label
// set.
func (m *httpMetrics) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the response now so the status is known
		}
		st := c.Response().Status
		s := m.seriesOf(routeLabel(c.Path(), st), methodLabel(c.Request().Method), st)
		s.requests.Inc()
		s.duration.Observe(time.Since(start).Seconds())
		return nil
	}
}
