package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/tracing/otlptest"
)

const traceTestWebhookSecret = "whsec_trace_test_secret"

// TestServeExportsTraces runs `api serve` with an OTLP endpoint: a request's
// W3C trace context is continued by a server span named by its route
// template, the limiter's decision is a child span with its outcome, policy,
// fail mode and Redis round trips, and a Stripe delivery's span names the
// event type.
func TestServeExportsTraces(t *testing.T) {
	col := otlptest.Start(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	api := startLiveAPI(t, redistest.StartServer(t), map[string]string{
		"MIGRATE_ON_START": "true", "STRIPE_WEBHOOK_SECRET": traceTestWebhookSecret,
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + col.GRPC, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
	})
	plan := "trace-" + strings.ToLower(randomToken()[4:16])
	api.must("POST", "/admin/v1/plans", api.admin, map[string]any{"key": plan, "name": plan,
		"rate":   map[string]any{"per_second": 1, "burst": 1},
		"quotas": map[string]any{"requests": map[string]any{"limit": 100, "mode": "hard"}}}, http.StatusCreated, nil)
	var tenant struct{ ID string }
	api.must("POST", "/admin/v1/tenants", api.admin, map[string]any{"name": "trace", "plan": plan}, http.StatusCreated, &tenant)
	var key struct{ Key string }
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/api-keys", api.admin, map[string]any{"name": "k"}, http.StatusCreated, &key)

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	check := func(traceparent string) int {
		req, _ := http.NewRequest(http.MethodPost, api.base+"/v1/check", strings.NewReader(`{"cost":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key.Key)
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		resp, err := api.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := check("00-" + traceID + "-" + parentID + "-01"); got != http.StatusOK {
		t.Fatalf("first check: %d", got)
	}
	server := col.Wait(t, 20*time.Second, "POST /v1/check in the caller's trace", func(s otlptest.Span) bool {
		return s.Name == "POST /v1/check" && s.TraceID == traceID
	})
	if server.ParentSpanID != parentID || server.Attrs["http.route"] != "/v1/check" || server.Attrs["http.response.status_code"] != "200" ||
		server.Attrs["tollgate.tenant_id"] != tenant.ID || server.Resource["service.name"] != "tollgate-api" {
		t.Fatalf("server span %+v", server)
	}
	decide := col.Wait(t, 20*time.Second, "limiter.decide under the check", func(s otlptest.Span) bool {
		return s.Name == "limiter.decide" && s.ParentSpanID == server.SpanID
	})
	if decide.Attrs["tollgate.limiter.outcome"] != "allowed" || decide.Attrs["tollgate.limiter.fallback"] != "" ||
		decide.Attrs["tollgate.limiter.round_trips"] == "" || decide.Attrs["tollgate.limiter.round_trips"] == "0" {
		t.Fatalf("decision span %+v", decide)
	}

	// The burst of 1 is spent: the next check is refused by the rate.
	if got := check(""); got != http.StatusTooManyRequests {
		t.Fatalf("second check: %d, want 429", got)
	}
	col.Wait(t, 20*time.Second, "a refused decision naming its policy", func(s otlptest.Span) bool {
		return s.Name == "limiter.decide" && s.Attrs["tollgate.limiter.outcome"] == "refused" && s.Attrs["tollgate.limiter.policy"] == "rate"
	})

	// A Stripe delivery: its span says which event it was.
	fixture, err := os.ReadFile("../../internal/billing/testdata/stripe/events/derived/customer.subscription.paused.json")
	if err != nil {
		t.Fatal(err)
	}
	var event map[string]any
	if err := json.Unmarshal(fixture, &event); err != nil {
		t.Fatal(err)
	}
	event["id"] = "evt_trace_" + strings.ToLower(randomToken()[4:16])
	body, _ := json.Marshal(event)
	req, _ := http.NewRequest(http.MethodPost, api.base+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: traceTestWebhookSecret, Timestamp: time.Now()}).Header)
	resp, err := api.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %d", resp.StatusCode)
	}
	col.Wait(t, 20*time.Second, "POST /webhooks/stripe with the event type", func(s otlptest.Span) bool {
		return s.Name == "POST /webhooks/stripe" && s.Attrs["stripe.event_type"] == event["type"] && s.Attrs["stripe.event_id"] == event["id"]
	})
	// The intake enqueued the event's job inside the request: River's
	// insert span is part of the same trace.
	col.Wait(t, 20*time.Second, "river.insert_many", func(s otlptest.Span) bool { return strings.HasPrefix(s.Name, "river.insert") })
}
