package main

import (
	"context"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgatehq/tollgate/internal/rls"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// TestServeAnswersEnvoyOnGRPCAddr runs `api serve` with GRPC_ADDR set: the
// rate limit service and its health answer beside HTTP, and both stop with
// the process.
func TestServeAnswersEnvoyOnGRPCAddr(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	grpcAddr := freeAddr(t)
	e["GRPC_ADDR"] = grpcAddr
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"serve"}, testkit.Getenv(e), &stdout, &stderr) }()
	listeningAddr(t, stderr.String, exited)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	testkit.Eventually(t, 30*time.Second, "grpc.health.v1 SERVING for the rate limit service", func() bool {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: rls.ServiceName})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "tollgate",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "Bearer tg_unknown"}}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("an unknown key: %v, want OVER_LIMIT", resp.OverallCode)
	}

	cancel()
	if code := waitExit(t, exited, stderr.String); code != exitOK {
		t.Fatalf("exit status after cancel = %d, want 0; stderr:\n%s", code, stderr.String())
	}
	if c, err := net.DialTimeout("tcp", grpcAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("the gRPC listener still accepts after run returned")
	}
}

// TestServeGRPCPortInUseExits1: an Envoy whose rate limit service is not
// there lets requests through, so a GRPC_ADDR that cannot be bound stops
// the api rather than serving HTTP alone.
func TestServeGRPCPortInUseExits1(t *testing.T) {
	t.Parallel()
	e := serveEnv(t)
	e["MIGRATE_ON_START"] = "false"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	e["GRPC_ADDR"] = ln.Addr().String()
	var stdout, stderr testkit.Buffer
	done := make(chan int, 1)
	go func() { done <- run(t.Context(), []string{"serve"}, testkit.Getenv(e), &stdout, &stderr) }()
	select {
	case code := <-done:
		if code != exitFailed {
			t.Fatalf("exit status = %d, want %d; stderr:\n%s", code, exitFailed, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("api kept running with GRPC_ADDR %s taken; stderr:\n%s", ln.Addr(), stderr.String())
	}
}
