package main

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/rls"
	"github.com/tollgatehq/tollgate/limiter"
)

// rlsKeys adapts the credentials service to the keys and tokens rls
// checks, the catalogue to its meters, and the limiter to its external ids.
type rlsKeys struct {
	*credentials.Service
	cat *catalogue.Service
	lim *limiter.Limiter
}

func (k rlsKeys) TenantOfKey(ctx context.Context, raw string) (string, error) {
	info, err := k.AuthenticateKey(ctx, raw, false)
	return info.TenantID, err
}

// MeterDefined is the catalogue's: whether some plan has a quota on meter.
func (k rlsKeys) MeterDefined(ctx context.Context, meter string) (bool, error) {
	return k.cat.MeterDefined(ctx, meter)
}

// TenantOfExternalID resolves a descriptor's external_id with the
// limiter's cached alias: no round trip once known.
func (k rlsKeys) TenantOfExternalID(ctx context.Context, ext string) (string, error) {
	return k.lim.ExternalTenant(ctx, ext)
}

// serveRLS answers Envoy's rate limit service on GRPC_ADDR until ctx ends,
// with the same limiter, keys and plans as POST /v1/check. Its health is
// SERVING while Postgres and Redis answer.
func serveRLS(ctx context.Context, cfg config.Config, cat *catalogue.Service, keys *credentials.Service, creds *credits.Service, lim *limiter.Limiter,
	pool *pgxpool.Pool, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger, ready func(string)) error {
	srv, err := rls.New(rlsKeys{Service: keys, cat: cat, lim: lim}, lim, rls.Options{Domain: cfg.GRPCRLSDomain, AdminToken: cfg.AdminToken, Log: log, Registerer: reg,
		CanGrow: creds.CanGrow})
	if err != nil {
		return err
	}
	return rls.Serve(ctx, cfg.GRPCAddr, srv, rls.ServeOptions{
		Probes: []rls.Probe{
			func(ctx context.Context) error { return pool.Ping(ctx) },
			func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		},
		ShutdownTimeout: cfg.ShutdownTimeout, Log: log, Ready: ready,
	})
}
