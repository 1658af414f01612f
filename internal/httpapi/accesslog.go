package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/logging"
)

// HeaderRequestID carries a request's id in and out: a caller's (a proxy's
// or the SaaS backend's) is kept, otherwise one is made, and the response
// always names it, so that a 429 or 503 a customer reports can be found in
// the access log.
const HeaderRequestID = "X-Request-Id"

// Context keys of what the access log line reports beside the request.
const (
	ctxDecision = "tollgate.decision" // allowed, refused, impossible, unavailable, overloaded
	ctxPolicy   = "tollgate.policy"   // the policy that refused
)

// RequestID is the id of the request ctx belongs to ("" outside a request).
func RequestID(ctx context.Context) string { return logging.RequestID(ctx) }

// setDecision records the limiter's verdict for the access log.
func setDecision(c echo.Context, decision, policy string) {
	c.Set(ctxDecision, decision)
	if policy != "" {
		c.Set(ctxPolicy, policy)
	}
}

// validRequestID accepts a caller's id when it is short visible ASCII: it is
// echoed in a header and written in logs, so nothing else is taken.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// accessLog is the outermost middleware: it settles the request id, then
// writes one line per request with the route template (never the raw path,
// which may hold ids or junk), status, duration, the tenant when an API key
// authenticated one, and the limiter's decision.
func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		r := c.Request()
		id := r.Header.Get(HeaderRequestID)
		if !validRequestID(id) {
			id = newRequestID()
		}
		c.Response().Header().Set(HeaderRequestID, id)
		// Lines logged while serving it name it too (logging.New's handler).
		c.SetRequest(r.WithContext(logging.WithRequestID(r.Context(), id)))
		err := next(c)
		if err != nil {
			c.Error(err) // write the response now so the status is known
		}
		// The request's own context, without the id: this line names it
		// itself (once), whatever the handler.
		ctx := r.Context()
		if !s.log.Enabled(ctx, slog.LevelInfo) {
			return nil // LOG_LEVEL=warn: no access log, no work for it
		}
		st := c.Response().Status
		attrs := make([]slog.Attr, 0, 9)
		attrs = append(attrs,
			slog.String("request_id", id),
			slog.String("method", methodLabel(r.Method)),
			slog.String("route", routeLabel(c.Path(), st)),
			slog.Int("status", st),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		)
		if t := tenantIDFrom(c); t != "" {
			attrs = append(attrs, slog.String("tenant", t))
		}
		if d, _ := c.Get(ctxDecision).(string); d != "" {
			attrs = append(attrs, slog.String("decision", d))
		}
		if p, _ := c.Get(ctxPolicy).(string); p != "" {
			attrs = append(attrs, slog.String("policy", p))
		}
		s.log.LogAttrs(ctx, slog.LevelInfo, "http request", attrs...)
		return nil
	}
}
