package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// hstsValue is the Strict-Transport-Security of answers over TLS: a year,
// without includeSubDomains or preload (the api cannot know that every
// other subdomain of its host speaks HTTPS; a proxy in front may add them).
const hstsValue = "max-age=31536000"

// securityHeaders runs before routing, so that every answer carries them
// (404s, 405s, problems, the pages): X-Content-Type-Options: nosniff, so
// that no browser reads a JSON or text answer as HTML or script; and HSTS
// when the request came over TLS, directly or through a trusted proxy that
// says so (browsers ignore HSTS over plain HTTP, RFC 6797 §8.1).
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		if s.overTLS(c.Request()) {
			h.Set("Strict-Transport-Security", hstsValue)
		}
		return next(c)
	}
}

// overTLS reports whether the client reached us over TLS: a TLS connection,
// or a trusted proxy's (TRUSTED_PROXIES) Forwarded proto=https or
// X-Forwarded-Proto: https. Anyone else's headers are ignored. The
// rightmost value is read: it is the one the nearest proxy set.
func (s *Server) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	ca := ClientAddrs{Trusted: s.TrustedProxies}
	peer := parseHost(r.RemoteAddr)
	if !peer.IsValid() || !ca.trusted(peer) {
		return false
	}
	if vals := r.Header.Values("Forwarded"); len(vals) > 0 {
		elems := strings.Split(vals[len(vals)-1], ",")
		for _, pair := range strings.Split(elems[len(elems)-1], ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if ok && strings.EqualFold(k, "proto") {
				return strings.EqualFold(strings.Trim(v, `"`), "https")
			}
		}
	}
	if vals := r.Header.Values("X-Forwarded-Proto"); len(vals) > 0 {
		parts := strings.Split(vals[len(vals)-1], ",")
		return strings.EqualFold(strings.TrimSpace(parts[len(parts)-1]), "https")
	}
	return false
}

// MetricsHandler serves g in Prometheus's text format. With a token
// (METRICS_TOKEN) it answers only `Authorization: Bearer <token>`, compared
// in constant time; anything else is 401 with WWW-Authenticate and a problem
// body, so that the traffic per route and the Stripe queue are not public.
// The api's METRICS_ADDR listener and the worker's serve it.
func MetricsHandler(g prometheus.Gatherer, token string) http.Handler {
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
				_ = json.NewEncoder(w).Encode(Problem{Type: ProblemBase + "unauthorized", Title: "Unauthorized",
					Status: http.StatusUnauthorized, Detail: "metrics need Authorization: Bearer <METRICS_TOKEN>"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
