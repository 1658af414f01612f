package httpapi

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// overloaded counts requests shed by the process-wide cap (MAX_IN_FLIGHT).
	overloaded prometheus.Counter
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
			Name: "tollgate_http_overloaded_total", Help: "Requests answered 503 because MAX_IN_FLIGHT decisions were already in progress in this process.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.overloaded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records every request by its route template, never its raw path,
// so that ids in URLs do not explode the label set.
func (m *httpMetrics) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the response now so the status is known
		}
		route := c.Path()
		if route == "" || c.Response().Status == 404 && route == "/*" {
			route = "unmatched"
		}
		status := strconv.Itoa(c.Response().Status)
		m.requests.WithLabelValues(route, c.Request().Method, status).Inc()
		m.duration.WithLabelValues(route, c.Request().Method, status).Observe(time.Since(start).Seconds())
		return nil
	}
}
