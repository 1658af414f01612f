package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/serve"
)

// serveMetrics serves /metrics (and /healthz) of the worker until ctx ends.
// The worker's job counters (Stripe events processed, lag, failures, drift
// repairs) exist only in its process, so it needs an endpoint of its own. A
// port that cannot be bound is logged, not fatal: jobs matter more than
// their metrics, and several workers may share a host.
// With METRICS_TOKEN, /metrics answers only that bearer token.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, token string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", serve.Metrics(reg, token))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	err := serve.ListenAndServe(ctx, mux, addr, 5*time.Second, func(bound string) {
		log.Info("worker metrics listening", "addr", bound)
	})
	if err != nil {
		log.Error("worker metrics server failed", "addr", addr, "err", err)
	}
}
