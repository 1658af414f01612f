package httpapi

import (
	"context"
	"strconv"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgatehq/tollgate/internal/tracing"
	"github.com/tollgatehq/tollgate/limiter"
)

// traceRequests makes a server span of each request, named by its method
// and route template (never the raw path: ids would make every name unique),
// continuing the caller's W3C trace context. Installed only while tracing is
// on.
func (s *Server) traceRequests(next echo.HandlerFunc) echo.HandlerFunc {
	tracer := tracing.Tracer()
	prop := otel.GetTextMapPropagator()
	return func(c echo.Context) error {
		req := c.Request()
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		ctx := prop.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		ctx, span := tracer.Start(ctx, req.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("http.route", route),
				attribute.String("url.path", req.URL.Path)))
		defer span.End()
		c.SetRequest(req.WithContext(ctx))
		err := next(c)
		if err != nil {
			c.Error(err) // the status is known only once the error is answered
			err = nil
		}
		status := c.Response().Status
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if tenant := tenantIDFrom(c); tenant != "" {
			span.SetAttributes(attribute.String("tollgate.tenant_id", tenant))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
		return err
	}
}

// allow is the limiter's decision, as a span of its own while tracing is
// on: the outcome, the refusing policy, the fail mode if one decided, and
// the Redis round trips it took.
func (s *Server) allow(ctx context.Context, tenant string, req limiter.Request) (*limiter.Decision, error) {
	if !tracing.Enabled() {
		return s.Limiter.Allow(ctx, tenant, req)
	}
	ctx, span := tracing.Tracer().Start(ctx, "limiter.decide")
	defer span.End()
	ctx, trips := tracing.WithRoundTrips(ctx)
	d, err := s.Limiter.Allow(ctx, tenant, req)
	span.SetAttributes(attribute.String("tollgate.tenant_id", tenant), attribute.Int64("tollgate.limiter.cost", max(req.Cost, 1)),
		attribute.Int64("tollgate.limiter.round_trips", trips.Load()))
	if req.Meter != "" {
		span.SetAttributes(attribute.String("tollgate.limiter.meter", req.Meter))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return d, err
	}
	outcome := "allowed"
	if !d.Allowed {
		outcome = "refused"
	}
	span.SetAttributes(attribute.String("tollgate.limiter.outcome", outcome), attribute.String("tollgate.limiter.policy", d.Policy),
		attribute.String("tollgate.limiter.fallback", string(d.Fallback)))
	return d, nil
}
