// Package serve runs an HTTP listener for the processes: the api's server
// and metrics listener, and the worker's metrics. It holds what they share
// below the API itself (timeouts, draining, the metrics endpoint's token),
// so that the worker serves its metrics without importing the API.
package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ListenAndServe serves h on addr until ctx ends, then drains for at most
// drain. ready, when not nil, receives the bound address (addr may end in
// :0).
func ListenAndServe(ctx context.Context, h http.Handler, addr string, drain time.Duration, ready func(addr string)) error {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w", addr, err)
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ProblemBase is the base of the problem types Tollgate answers.
const ProblemBase = "https://tollgate.dev/problems/"

// Metrics serves g in Prometheus's text format. With a token
// (METRICS_TOKEN) it answers only `Authorization: Bearer <token>`, compared
// in constant time; anything else is 401 with WWW-Authenticate and a problem
// body, so that the traffic per route and the Stripe queue are not public.
// The api's METRICS_ADDR listener and the worker's serve it.
func Metrics(g prometheus.Gatherer, token string) http.Handler {
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
			if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-metrics"`)
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnauthorized)
				_ = json.NewEncoder(w).Encode(struct {
					Type   string `json:"type"`
					Title  string `json:"title"`
					Status int    `json:"status"`
					Detail string `json:"detail"`
				}{ProblemBase + "unauthorized", "Unauthorized", http.StatusUnauthorized, "metrics need Authorization: Bearer <METRICS_TOKEN>"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
