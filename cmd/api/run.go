package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/cmd/internal/wire"
	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/buildinfo"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/logging"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/internal/tracing"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/web"
)

const usage = `usage: api [serve|migrate|seed-demo|version]

  serve      apply migrations (unless MIGRATE_ON_START=false) and serve HTTP (default)
  migrate    create the database if missing and apply every migration
  seed-demo  create the demo plans, tenant and API key; print how to use them
  version    print the build (version, VCS revision, Go version)
`

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2 // bad configuration or usage
)

// run is main without the process: tests call it with their own args,
// environment and writers, and cancel ctx to stop it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	if cmd == "-h" || cmd == "--help" || cmd == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if cmd == "version" || cmd == "--version" {
		// No configuration needed: it answers on a host without any.
		fmt.Fprintln(stdout, "api", buildinfo.Read())
		return exitOK
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitConfig
	}
	// One admin token per deployment: serve refuses to make one up (each
	// api instance would make its own), and nothing logs it.
	tokenFile := ""
	if cmd == "serve" || (cmd == "seed-demo" && cfg.Dev) {
		if tokenFile, err = cfg.ResolveAdminToken(); err != nil {
			fmt.Fprintln(stderr, err)
			return exitConfig
		}
	}
	log := logging.New(stderr, cfg.LogLevel)
	for _, d := range cfg.Deprecated {
		log.Warn("deprecated configuration", "variable", d)
	}
	if tokenFile != "" {
		log.Warn("ADMIN_TOKEN is empty; TOLLGATE_DEV uses the token in this file", "admin_token_file", tokenFile)
	}
	switch cmd {
	case "migrate":
		err = migrate(ctx, cfg, log)
	case "serve":
		var stopTracing func(context.Context) error
		if stopTracing, err = tracing.Setup(ctx, "tollgate-api", "", getenv); err != nil {
			fmt.Fprintln(stderr, err)
			return exitConfig
		}
		err = serve(ctx, cfg, log, nil)
		flushTraces(ctx, stopTracing, log)
	case "seed-demo":
		err = seedDemo(ctx, cfg, log, stdout)
	default:
		fmt.Fprintf(stderr, "api: unknown command %q\n%s", cmd, usage)
		return exitConfig
	}
	if err != nil {
		log.Error("api failed", "command", cmd, "err", err)
		return exitFailed
	}
	return exitOK
}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if err := postgres.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	return postgres.Migrate(ctx, cfg.DatabaseURL, log)
}

// serve runs the HTTP server until ctx ends. ready, when not nil, gets the
// bound address (tests listen on :0).
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(string)) error {
	if cfg.MigrateOnStart {
		if err := migrate(ctx, cfg, log); err != nil {
			return err
		}
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.DatabaseMaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb, err := cfg.NewRedis()
	if err != nil {
		return err
	}
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	// Webhooks: the endpoints' admin routes, and the events of every
	// entitlements change written in its transaction.
	hooks, err := wire.Notify(pool, cfg, log)
	if err != nil {
		return err
	}
	ents := newEntitlements(pool, rdb, cfg, log, hooks.EntitlementsChanged)
	cat := wire.Catalogue(pool, ents, log)
	keys := newCredentials(pool, rdb, ents, cfg, log)
	// The revocation subscription lives as long as the server; it must end
	// before rdb is closed.
	subCtx, stopSub := context.WithCancel(ctx)
	subDone := make(chan struct{})
	go func() { defer close(subDone); _ = keys.Run(subCtx) }()
	defer func() { stopSub(); <-subDone }()
	bill, err := wire.Billing(pool, ents, cat, cfg, log, reg, limitstore.New(rdb, keyspace.DefaultPrefix))
	if err != nil {
		return err
	}
	// The limiter rebuilds a quota counter lost with Redis from metering's
	// durable usage, so a Redis restart never hands out a fresh quota.
	// Grants: the admin's grants and voids are written to Redis as they
	// commit, the limiter rebuilds grants Redis lost from the ledger, and
	// GET /v1/usage shows them.
	creds := wire.Credits(pool, ents, cat, log, credits.Options{Grants: limitstore.New(rdb, keyspace.DefaultPrefix)})
	meter := metering.NewService(pool, limitstore.New(rdb, keyspace.DefaultPrefix), log, metering.Options{Snapshot: ents.CachedSnapshot, RedisTimeout: cfg.RedisTimeout, Grants: usageGrants(creds),
		Prepaid: creds.PrepaidConsumed})
	lim, closeLimiter, err := newLimiter(cfg, ents, meter.LoadUsage, creds.RedisGrants, reg)
	if err != nil {
		return err
	}
	defer closeLimiter()
	// The dashboard and the console (web) read through the owners and the limiter's
	// counters, and act through the same services as the admin API.
	// One failed-login window per client IP for the API and the pages.
	authLim := httpapi.NewAuthLimiter(lim, httpapi.AuthLimitOptions{TrustedProxies: cfg.TrustedProxies})
	var resync web.Resyncer   // the console's "resync now" needs Stripe
	var upgrades web.Upgrader // so do the dashboard's plan changes
	var topups web.TopupBuyer // and its "Buy more"
	if cfg.StripeSecretKey != "" {
		resync, upgrades, topups = bill, bill, bill
	}
	trail := wire.Audit(pool, log, ents, cat, keys, bill, creds) // who changed what, through the API or the console
	pages, err := web.New(web.Deps{Log: log, DB: pool, Limits: limitstore.New(rdb, keyspace.DefaultPrefix),
		Snapshots: ents, Usage: meter, Entitlements: ents, Catalogue: cat, Credentials: keys, Billing: bill, Metering: meter,
		AdminToken: cfg.AdminToken, AdminTokens: cfg.AdminTokens, Audit: trail,
		DefaultPlan: cfg.DefaultPlan, PublicURL: cfg.PublicURL, RedisTimeout: cfg.RedisTimeout,
		BillingContact: cfg.BillingContact, Upgrades: upgrades, Attempts: lim,
		Plans: planChanger(cfg, ents, bill), PlanAdmin: cat, Addons: cat, Keys: keys, Overrides: ents, Explainer: ents, Replayer: bill, Resyncer: resync, Guard: authLim,
		Tenants: ents, Previews: ents, Webhooks: hooks, Grants: creds, Topups: topups})
	if err != nil {
		return err
	}
	srv, err := httpapi.NewServer(httpapi.Deps{Log: log, DB: pool, Redis: rdb, Registry: reg, AdminToken: cfg.AdminToken,
		AdminTokens: cfg.AdminTokens, Audit: trail, Entitlements: ents, Catalogue: cat, Credentials: keys, PlanChanger: planChanger(cfg, ents, bill), Billing: bill, Metering: meter, Limiter: lim,
		AuthLimiter: authLim, DashboardLinks: pages, Notify: hooks, Credits: creds, RequestTimeout: cfg.DatabaseTimeout, OutboundTimeout: billing.DefaultStripeTimeout,
		TrustedProxies: cfg.TrustedProxies, MetricsToken: cfg.MetricsToken, MetricsElsewhere: cfg.MetricsAddr != ""})
	if err != nil {
		return err
	}
	pages.Register(srv.Echo())
	if cfg.MetricsAddr != "" {
		go serveMetrics(ctx, cfg.MetricsAddr, reg, cfg.MetricsToken, log)
	}
	// SIGTERM is otherwise silent until the process is gone: say that the
	// drain began and how long it may take, and when it ended.
	drainLogged := make(chan struct{})
	stopDrainLog := context.AfterFunc(ctx, func() {
		log.Info("api draining", "timeout", cfg.ShutdownTimeout.String())
		close(drainLogged)
	})
	listening := func(addr string) {
		log.Info("api listening", "addr", addr, "version", buildinfo.Read().Version)
		if ready != nil {
			ready(addr)
		}
	}
	if cfg.GRPCAddr != "" {
		// The gRPC listener lives as long as the HTTP one: either failing
		// (a port that cannot be bound) ends both, since an Envoy without
		// its rate limit service lets every request through.
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return serveRLS(gctx, cfg, cat, keys, creds, lim, pool, rdb, reg, log, nil) })
		g.Go(func() error { return httpapi.ListenAndServe(gctx, srv, cfg.HTTPAddr, cfg.ShutdownTimeout, listening) })
		err = g.Wait()
	} else {
		err = httpapi.ListenAndServe(ctx, srv, cfg.HTTPAddr, cfg.ShutdownTimeout, listening)
	}
	// AfterFunc runs its line on a goroutine of its own: an idle server
	// drains faster than it is scheduled, so wait for it (when ctx ended)
	// and the log reads draining, then stopped. A context closes its Done
	// channel before it starts its AfterFuncs, so the drain can even end
	// before the line was started: stop then wins, and the line is
	// written here.
	if stopDrainLog() {
		if ctx.Err() != nil {
			log.Info("api draining", "timeout", cfg.ShutdownTimeout.String())
		}
	} else {
		<-drainLogged
	}
	if err == nil {
		log.Info("api stopped")
	}
	return err
}

// serveMetrics serves /metrics on METRICS_ADDR until ctx ends: off the
// public port, so that traffic per route and the Stripe queue are not shown
// to whoever reaches the api. A port that cannot be bound is logged, not
// fatal (as the worker's): requests matter more than their metrics.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, token string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", httpapi.MetricsHandler(reg, token))
	err := httpapi.ListenAndServe(ctx, mux, addr, 5*time.Second, func(bound string) {
		log.Info("api metrics listening", "addr", bound)
	})
	if err != nil {
		log.Error("api metrics server failed", "addr", addr, "err", err)
	}
}

// newEntitlements builds the entitlements service of a process: snapshots
// go through rdb under the limiter's key prefix.
// onChange (nil for none) writes the change's webhook events in its
// transaction.
func newEntitlements(pool *pgxpool.Pool, rdb redis.UniversalClient, cfg config.Config, log *slog.Logger, onChange func(context.Context, pgx.Tx, entitlements.Change) error) *entitlements.Service {
	var store *limitstore.Store
	if rdb != nil {
		store = limitstore.New(rdb, keyspace.DefaultPrefix)
	}
	return entitlements.NewService(pool, store, log, entitlements.Options{
		DefaultPlan: cfg.DefaultPlan, GracePeriod: cfg.GracePeriod,
		RedisTimeout: cfg.RedisTimeout, OnChange: onChange,
	})
}

// newCredentials builds the API key and service token service of a
// process: revocations go through rdb (nil: none, every check asks
// Postgres) under the limiter's key prefix.
func newCredentials(pool *pgxpool.Pool, rdb redis.UniversalClient, ents *entitlements.Service, cfg config.Config, log *slog.Logger) *credentials.Service {
	return credentials.New(pool, ents, log, credentials.Options{
		Redis: rdb, Prefix: keyspace.DefaultPrefix, RedisTimeout: cfg.RedisTimeout,
	})
}

// demoPlans are what seed-demo creates when missing.
func demoPlans() []catalogue.PlanInput {
	i64 := func(n int64) *int64 { return &n }
	f64 := func(f float64) *float64 { return &f }
	return []catalogue.PlanInput{
		{Key: "free", Name: "Free",
			Rate:   &catalogue.RateInput{PerSecond: f64(5), Burst: i64(10)},
			Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: i64(1000), Mode: "hard"}}},
		{Key: "pro", Name: "Pro", StripePriceID: "price_pro_monthly",
			Rate:        &catalogue.RateInput{PerSecond: f64(20), Burst: i64(200)},
			Concurrency: i64(10),
			Quotas: map[string]*catalogue.QuotaInput{
				"requests": {Limit: i64(100000), Mode: "hard"},
				"exports":  {Limit: i64(50), Mode: "soft"}},
			Features: []string{"exports", "sso"}},
		{Key: "team", Name: "Team",
			Rate:        &catalogue.RateInput{PerSecond: f64(100), Burst: i64(1000)},
			Concurrency: i64(50),
			Quotas: map[string]*catalogue.QuotaInput{
				"requests": {Limit: i64(1000000), Mode: "hard"},
				"exports":  {Limit: i64(500), Mode: "soft"}},
			Features: []string{"exports", "sso"}},
	}
}

// demoTenant is the name seed-demo finds its tenant by.
const demoTenant = "Demo Co"

// seedDemo creates the demo plans and tenant unless they exist (several
// runs, even at once, leave one of each), issues a fresh API key and prints
// how to use it. Existing plans are left as they are.
func seedDemo(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer) error {
	if err := migrate(ctx, cfg, log); err != nil {
		return err
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.DatabaseMaxConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	var rdb redis.UniversalClient
	if c, err := cfg.NewRedis(); err == nil {
		if err := c.Ping(ctx).Err(); err == nil {
			rdb = c
			defer c.Close()
		} else {
			// Snapshots are loaded from Postgres on first use anyway.
			log.Warn("seed-demo: redis unreachable; snapshots will be loaded on first use", "err", err)
			c.Close()
		}
	}
	ents := newEntitlements(pool, rdb, cfg, log, nil) // seeding creates; creations emit nothing

	// One seeder at a time: the checks below and the creates must not interleave.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("seed-demo: %w", err)
	}
	defer conn.Release()
	const seedLock = 774412
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, seedLock); err != nil {
		return fmt.Errorf("seed-demo: lock: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, seedLock) }()

	cat := wire.Catalogue(pool, ents, log)
	for _, in := range demoPlans() {
		_, err := cat.GetPlan(ctx, in.Key)
		if apperr.CodeOf(err) == apperr.NotFound {
			_, err = cat.CreatePlan(ctx, in)
		}
		if err != nil {
			return fmt.Errorf("seed-demo: plan %s: %w", in.Key, err)
		}
	}
	tenantID, err := findDemoTenant(ctx, ents)
	if err != nil {
		return err
	}
	if tenantID == "" {
		t, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: demoTenant, Plan: "pro"})
		if err != nil && t.ID == "" {
			return fmt.Errorf("seed-demo: tenant: %w", err)
		}
		tenantID = t.ID
	}
	key, err := newCredentials(pool, rdb, ents, cfg, log).IssueKey(ctx, tenantID, "seed-demo")
	if err != nil {
		return fmt.Errorf("seed-demo: api key: %w", err)
	}
	fmt.Fprintf(stdout, "tenant_id: %s\n", tenantID)
	fmt.Fprintf(stdout, "api_key: %s\n", key.Key)
	if cfg.AdminToken != "" {
		fmt.Fprintf(stdout, "admin_token: %s\n", cfg.AdminToken)
	} else {
		fmt.Fprintln(stdout, "note: ADMIN_TOKEN is not set; api serve needs it (or TOLLGATE_DEV=true)")
	}
	fmt.Fprintf(stdout, "dashboard: %s/dashboard\n", cfg.PublicURL)
	fmt.Fprintf(stdout, "try: curl -H \"Authorization: Bearer %s\" %s/v1/entitlements\n", key.Key, cfg.PublicURL)
	return nil
}

func findDemoTenant(ctx context.Context, ents *entitlements.Service) (string, error) {
	q := entitlements.ListQuery{Q: demoTenant, Limit: 200}
	oldest := ""
	for {
		page, err := ents.ListTenants(ctx, q)
		if err != nil {
			return "", fmt.Errorf("seed-demo: find tenant: %w", err)
		}
		// Pages run newest first: the last match seen is the oldest, the demo tenant.
		for _, t := range page.Tenants {
			if t.Name == demoTenant {
				oldest = t.ID
			}
		}
		if page.NextCursor == "" {
			return oldest, nil
		}
		q.Cursor = page.NextCursor
	}
}

// flushTraces sends the spans still buffered, within a few seconds: a
// collector that does not answer must not hold the exit.
func flushTraces(ctx context.Context, stop func(context.Context) error, log *slog.Logger) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := stop(fctx); err != nil {
		log.Warn("traces not flushed", "err", err)
	}
}

// usageGrants gives GET /v1/usage a meter's active grants from credits.
func usageGrants(creds *credits.Service) metering.GrantsFunc {
	return func(ctx context.Context, tenantID, meter string) ([]metering.UsageGrant, error) {
		b, err := creds.Balance(ctx, tenantID, meter, time.Now())
		if err != nil {
			return nil, err
		}
		out := make([]metering.UsageGrant, len(b.Grants))
		for i, g := range b.Grants {
			out[i] = metering.UsageGrant{ID: g.ID, Remaining: g.Remaining, ExpiresAt: g.ExpiresAt, Source: g.Source}
		}
		return out, nil
	}
}
