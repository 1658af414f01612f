package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/tracing"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// newLimiter builds the api's limiter: its own Redis client with context
// deadlines enforced by go-redis (so that LIMITER_TIMEOUT bounds every call
// without a goroutine per call), snapshots missing from Redis loaded from
// Postgres by the entitlements service, quota counters missing from Redis
// rebuilt from durable usage (usage may be nil), grants lost with Redis
// rebuilt from the credits ledger (grants may be nil), the fail mode of
// LIMITER_FAIL_MODE for every policy, prefetching with LIMITER_PREFETCH, and
// Prometheus metrics on reg. The
// returned close func closes the limiter and its client.
func newLimiter(cfg config.Config, ents *entitlements.Service, usage limiter.UsageLoader, grants func(context.Context, string) ([]keyspace.Grant, error), reg prometheus.Registerer) (*limiter.Limiter, func(), error) {
	rdb, err := limiterRedis(cfg)
	if err != nil {
		return nil, nil, err
	}
	m, err := httpapi.NewLimiterMetrics(reg)
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("api: limiter metrics: %w", err)
	}
	mode := limiter.FailMode(cfg.LimiterFailMode)
	lim, err := limiter.New(rdb, limiter.Options{
		Prefix:            keyspace.DefaultPrefix,
		Loader:            ents.ReloadSnapshot,
		ExternalLoader:    ents.LoadExternal,
		UsageLoader:       usage,
		GrantLoader:       grants,
		Timeout:           cfg.LimiterTimeout,
		FailMode:          limiter.FailModes{Rate: mode, Quota: mode, Concurrency: mode, Window: mode},
		ExpectedInstances: cfg.ExpectedInstances,
		MaxInFlight:       cfg.MaxInFlight,
		// Overload is shed with 503 before decisions queue past their
		// deadline (issue 21); MAX_IN_FLIGHT bounds the adaptive limit.
		AdaptiveConcurrency: true,
		Prefetch:            cfg.LimiterPrefetch,
		Batching:            cfg.LimiterBatching,
		LeaseTTL:            cfg.LeaseTTL,
		Hooks:               m.Hooks(),
	})
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("api: %w", err)
	}
	return lim, func() { lim.Close(); rdb.Close() }, nil
}

// limiterRedis is cfg.NewRedis's client (ContextTimeoutEnabled, and a
// Sentinel or Cluster client when configured so), one of the limiter's own.
func limiterRedis(cfg config.Config) (redis.UniversalClient, error) {
	c, err := cfg.NewRedis()
	if err != nil {
		return nil, err
	}
	if tracing.Enabled() {
		c.AddHook(tracing.RedisHook{}) // round trips per decision span
	}
	return c, nil
}
