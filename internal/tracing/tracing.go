// Package tracing sets up OpenTelemetry traces for api and worker: off unless
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set,
// exported over OTLP (OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf, the
// default), configured by the standard OTEL_* variables the exporters and
// the SDK read themselves (headers, timeout, insecure, sampler, batch
// delays, resource attributes), with W3C trace context in and out.
//
// Off, nothing here costs the request path more than an atomic load: the
// HTTP middleware, the decision span and the Redis hook are not installed.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of Tollgate's own spans.
const Name = "github.com/tollgatehq/tollgate"

var enabled atomic.Bool

// Enabled reports whether Setup turned tracing on in this process.
func Enabled() bool { return enabled.Load() }

// Tracer is Tollgate's tracer (the global provider's: a no-op while off).
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// Setup turns tracing on when the environment names an OTLP endpoint and
// returns the function that flushes and stops it (a no-op when off).
// service is the default service.name (OTEL_SERVICE_NAME wins); version
// becomes service.version.
func Setup(ctx context.Context, service, version string, getenv func(string) string) (func(context.Context) error, error) {
	// Trace context is read and passed on even while off, so that a
	// request's traceparent reaches the services we call.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") || strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return func(context.Context) error { return nil }, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	// The endpoint comes from getenv (the process's configuration); the
	// exporters read the rest of OTEL_EXPORTER_OTLP_* themselves.
	var client otlptrace.Client
	switch protocol {
	case "", "http/protobuf":
		client = otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(tracesURL(endpoint, getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")))
	case "grpc":
		client = otlptracegrpc.NewClient(otlptracegrpc.WithEndpointURL(endpoint))
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not grpc or http/protobuf", protocol)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// resource.Default read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
	// they win over our defaults.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		defer otel.SetTracerProvider(noop.NewTracerProvider())
		return tp.Shutdown(ctx)
	}, nil
}

// tracesURL is the OTLP/HTTP traces URL: a signal-specific endpoint is used
// as given, the general one gets /v1/traces appended (the OTLP exporter
// specification).
func tracesURL(endpoint string, specific bool) string {
	if specific {
		return endpoint
	}
	return strings.TrimRight(endpoint, "/") + "/v1/traces"
}

// RiverMiddleware traces River's inserts and jobs (otelriver: a span per
// job with its kind, queue, attempt and outcome, linked to the span that
// enqueued it); nil while off.
func RiverMiddleware() []rivertype.Middleware {
	if !Enabled() {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation: true, EnableWorkSpanJobKindSuffix: true,
	})}
}

// Transport wraps base (nil: http.DefaultTransport) so that each outgoing
// request (the Stripe API) is a client span carrying traceparent; base
// itself while off.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if !Enabled() {
		return base
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := Tracer().Start(req.Context(), req.Method+" "+req.URL.Host,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", req.Method),
			attribute.String("server.address", req.URL.Host), attribute.String("url.path", req.URL.Path)))
	defer span.End()
	req = req.Clone(ctx)
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}

type roundTripsKey struct{}

// WithRoundTrips returns a context in which the Redis hook counts round
// trips into the returned counter: a decision span reports how many it
// took.
func WithRoundTrips(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, roundTripsKey{}, n), n
}

// RedisHook counts round trips (a command or a pipeline each) for
// WithRoundTrips; add it with rdb.AddHook only while Enabled.
type RedisHook struct{}

func count(ctx context.Context) {
	if n, ok := ctx.Value(roundTripsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}
