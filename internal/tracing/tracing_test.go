package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/internal/tracing"
	"github.com/tollgatehq/tollgate/internal/tracing/otlptest"
)

func TestOffWithoutAnEndpoint(t *testing.T) {
	stop, err := tracing.Setup(context.Background(), "svc", "v1", testkit.Getenv(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	if tracing.Enabled() {
		t.Fatal("tracing is on without OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if tracing.RiverMiddleware() != nil {
		t.Fatal("River middleware installed while off")
	}
	if tr := tracing.Transport(http.DefaultTransport); tr != http.DefaultTransport {
		t.Fatal("the Stripe transport is wrapped while off")
	}
	// An endpoint with the SDK disabled by the standard variable stays off.
	stop2, err := tracing.Setup(context.Background(), "svc", "v1", testkit.Getenv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2(context.Background())
	if tracing.Enabled() {
		t.Fatal("OTEL_SDK_DISABLED=true left tracing on")
	}
}

func TestAnUnknownProtocolIsAnError(t *testing.T) {
	_, err := tracing.Setup(context.Background(), "svc", "v1", testkit.Getenv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}))
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Fatalf("err = %v, want one naming OTEL_EXPORTER_OTLP_PROTOCOL", err)
	}
}

// TestSpansReachTheCollector exports over both OTLP protocols, with the
// service's name and version on the resource, and OTEL_SERVICE_NAME winning.
func TestSpansReachTheCollector(t *testing.T) {
	for _, tc := range []struct{ protocol, envName, wantName string }{
		{"grpc", "", "tollgate-test"},
		{"http/protobuf", "billing-edge", "billing-edge"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			col := otlptest.Start(t)
			endpoint := col.HTTP
			if tc.protocol == "grpc" {
				endpoint = "http://" + col.GRPC
			}
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
			if tc.envName != "" {
				t.Setenv("OTEL_SERVICE_NAME", tc.envName)
			}
			stop, err := tracing.Setup(context.Background(), "tollgate-test", "1.2.3", testkit.Getenv(map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol}))
			if err != nil {
				t.Fatal(err)
			}
			defer stop(context.Background())
			if !tracing.Enabled() {
				t.Fatal("tracing is off with an endpoint")
			}
			_, span := tracing.Tracer().Start(context.Background(), "unit-of-work")
			span.End()
			got := col.Wait(t, 10*time.Second, "unit-of-work", func(s otlptest.Span) bool { return s.Name == "unit-of-work" })
			if got.Resource["service.name"] != tc.wantName || got.Resource["service.version"] != "1.2.3" {
				t.Fatalf("resource %v: want service.name %s, service.version 1.2.3", got.Resource, tc.wantName)
			}
		})
	}
}

// TestTransportCarriesTraceContextOut: a Stripe call is a client span, and
// the request carries its traceparent.
func TestTransportCarriesTraceContextOut(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	stop, err := tracing.Setup(context.Background(), "tollgate-test", "", testkit.Getenv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + col.GRPC, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Traceparent")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ctx, parent := tracing.Tracer().Start(context.Background(), "job")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/customers/cus_1", nil)
	resp, err := (&http.Client{Transport: tracing.Transport(nil)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	parent.End()
	tp := <-got
	traceID := parent.SpanContext().TraceID().String()
	if !strings.HasPrefix(tp, "00-"+traceID+"-") {
		t.Fatalf("traceparent %q does not carry the trace %s", tp, traceID)
	}
	client := col.Wait(t, 10*time.Second, "GET client span", func(s otlptest.Span) bool { return strings.HasPrefix(s.Name, "GET ") })
	if client.TraceID != traceID || client.ParentSpanID != parent.SpanContext().SpanID().String() ||
		client.Attrs["url.path"] != "/v1/customers/cus_1" || client.Attrs["http.response.status_code"] != "200" {
		t.Fatalf("client span %+v", client)
	}
	if !strings.Contains(tp, client.SpanID) {
		t.Fatalf("traceparent %q names span %s, not the client span", tp, client.SpanID)
	}
}
