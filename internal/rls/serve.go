package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// ServiceName is the gRPC service Envoy calls; grpc.health.v1 answers for
// it and for the empty name.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Probe reports whether a dependency answers (Postgres, Redis); health says
// SERVING only while every probe passes.
type Probe func(ctx context.Context) error

// ServeOptions configure Serve.
type ServeOptions struct {
	// Probes are checked every ProbeInterval (default 2 s), each within
	// a second.
	Probes        []Probe
	ProbeInterval time.Duration
	// ShutdownTimeout bounds the graceful stop (default 15 s).
	ShutdownTimeout time.Duration
	Log             *slog.Logger
	// Ready, when set, gets the bound address (tests listen on :0).
	Ready func(addr string)
}

// Serve answers the rate limit service and grpc.health.v1 on addr until ctx
// ends, then stops gracefully.
func Serve(ctx context.Context, addr string, srv *Server, opts ServeOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rls: listen %s: %w", addr, err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := grpc.NewServer(
		// Envoy keeps one long-lived HTTP/2 connection per worker thread;
		// let its pings through so an idle gateway keeps it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	rlsv3.RegisterRateLimitServiceServer(g, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)

	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	go watch(probeCtx, hs, opts, log)

	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	log.Info("rls listening", "addr", ln.Addr().String())
	if opts.Ready != nil {
		opts.Ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("rls: serve: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown() // NOT_SERVING first, so Envoy's health checks move away
	timeout := opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(timeout):
		g.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("rls: serve: %w", err)
	}
	return nil
}

// watch sets the health of "" and ServiceName from the probes.
func watch(ctx context.Context, hs *health.Server, opts ServeOptions, log *slog.Logger) {
	every := opts.ProbeInterval
	if every <= 0 {
		every = 2 * time.Second
	}
	last := healthpb.HealthCheckResponse_UNKNOWN
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		status := healthpb.HealthCheckResponse_SERVING
		for _, p := range opts.Probes {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err := p(pctx)
			cancel()
			if err != nil {
				status = healthpb.HealthCheckResponse_NOT_SERVING
				if last != status {
					log.Warn("rls: not serving", "err", err)
				}
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		if status != last {
			hs.SetServingStatus("", status)
			hs.SetServingStatus(ServiceName, status)
			last = status
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
