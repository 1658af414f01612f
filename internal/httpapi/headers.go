package httpapi

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/serve"
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

// MetricsHandler serves g in Prometheus's text format, behind the token
// when one is set (serve.Metrics).
func MetricsHandler(g prometheus.Gatherer, token string) http.Handler {
	return serve.Metrics(g, token)
}
