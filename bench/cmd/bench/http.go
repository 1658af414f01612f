package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/httpapi"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// queryCounter counts the queries the api sends to Postgres, to show that
// the API-key lookup costs no query per request in steady state.
type queryCounter struct{ n atomic.Int64 }

func (q *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}
func (q *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// benchAdminToken guards the in-process api's admin API, which the bench
// does not use.
const benchAdminToken = "tga_bench_only"

// benchHTTP starts the api in-process (as cmd/api wires it) on a bench
// database and a bench Redis prefix, seeds tenants with one API key each,
// and drives POST /v1/check with c.goroutines concurrent HTTP clients.
func benchHTTP(ctx context.Context, c config, stdout io.Writer) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := postgres.EnsureDatabase(ctx, c.dbURL); err != nil {
		return fmt.Errorf("bench: -db: %w", err)
	}
	if err := postgres.Migrate(ctx, c.dbURL, log); err != nil {
		return fmt.Errorf("bench: -db: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(c.dbURL)
	if err != nil {
		return fmt.Errorf("bench: -db: %w", err)
	}
	queries := &queryCounter{}
	pcfg.ConnConfig.Tracer = queries
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("bench: -db: %w", err)
	}
	defer pool.Close()

	prefix := benchPrefix()
	rdb, _, err := newClient(c.redisURL) // the server side's client (snapshots, revocations)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: redis at %s: %w", c.redisURL, err)
	}
	limRDB, limTrips, err := newClient(c.redisURL) // the limiter's own, as in cmd/api
	if err != nil {
		return err
	}
	defer limRDB.Close()
	m := machine(ctx, rdb)
	fmt.Fprintf(stdout, "machine: %s\nprefix: %s, %d tenants, %v clients, %d runs of %v in %v slices\n",
		m, prefix, c.tenants, c.goroutines, c.runs, c.duration, c.slice)
	runID := strings.TrimPrefix(prefix, "tgbench")
	ents := entitlements.NewService(pool, limitstore.New(rdb, prefix), log, entitlements.Options{})
	cat := catalogue.NewService(pool, log, catalogue.Options{Touch: ents.TouchCatalogue})
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if n, err := unlinkPrefixes(cctx, rdb, prefix+"*"); err != nil {
			fmt.Fprintf(stdout, "cleanup: redis: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "cleanup: unlinked %d keys\n", n)
		}
		if err := deleteBenchTenants(cctx, ents, runID); err != nil {
			fmt.Fprintf(stdout, "cleanup: postgres: %v\n", err)
		}
	}()

	creds := credentials.New(pool, ents, log, credentials.Options{Redis: rdb, Prefix: prefix})
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() { _ = creds.Run(runCtx) }()
	reg := prometheus.NewRegistry()
	lm, err := httpapi.NewLimiterMetrics(reg)
	if err != nil {
		return err
	}
	lim, err := limiter.New(limRDB, limiter.Options{Prefix: prefix, Loader: ents.ReloadSnapshot, Hooks: lm.Hooks(), Timeout: c.timeout})
	if err != nil {
		return err
	}
	defer lim.Close()
	srv, err := httpapi.NewServer(httpapi.Deps{Log: log, DB: pool, Redis: rdb, Registry: reg, AdminToken: benchAdminToken,
		Entitlements: ents, Catalogue: cat, Credentials: creds, Limiter: lim})
	if err != nil {
		return err
	}
	addrc := make(chan string, 1)
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- httpapi.ListenAndServe(runCtx, srv, "127.0.0.1:0", 5*time.Second, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-srvErr:
		return fmt.Errorf("bench: api: %w", err)
	}
	base := "http://" + addr

	fmt.Fprintf(stdout, "seeding %d tenants with one API key each...\n", c.tenants)
	start := time.Now()
	keys, err := seedTenants(ctx, ents, cat, creds, runID, c.tenants)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seeded in %v\n", time.Since(start).Round(time.Millisecond))

	maxG := 0
	for _, g := range c.goroutines {
		maxG = max(maxG, g)
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: maxG * 2, MaxIdleConnsPerHost: maxG * 2, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	body := []byte(`{"cost": 1, "meter": "requests"}`)
	var refused atomic.Int64
	check := func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/check", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusTooManyRequests:
			refused.Add(1)
		}
		return fmt.Errorf("POST /v1/check: %s", resp.Status)
	}
	// Warm up as a running service would be: every key authenticated and
	// every snapshot in the near-cache.
	if err := warm(ctx, keys, check); err != nil {
		return err
	}
	healthz := func(ctx context.Context, _ *mrand.Rand) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	queries0, trips0 := queries.n.Load(), limTrips.n.Load()
	fallbacks0, redisErrs0 := limiterCounts(reg)
	var checks atomic.Int64
	cs := []contender{
		{name: "POST /v1/check (key auth + rate + quota)", op: func(ctx context.Context, rng *mrand.Rand) error {
			checks.Add(1)
			return check(ctx, keys[rng.IntN(len(keys))])
		}},
		{name: "GET /healthz (HTTP floor, no decision)", op: healthz},
	}
	rows, err := alternate(ctx, c, cs, stdout)
	if err != nil {
		return err
	}
	n := checks.Load()
	qPer := float64(queries.n.Load()-queries0) / float64(n)
	tPer := float64(limTrips.n.Load()-trips0) / float64(n)
	tbl := table(rows, "")
	fallbacks, redisErrs := limiterCounts(reg)
	extra := fmt.Sprintf("During the measured slices: %d checks, %.4f Postgres queries per check (API-key cache refreshes and "+
		"last-used writes, not a lookup per request), %.3f limiter Redis round trips per check, %d refused (should be 0), "+
		"%d decided by the fail mode because Redis did not answer within the limiter's %v timeout (%d Redis errors or timeouts).\n",
		n, qPer, tPer, refused.Load(), fallbacks-fallbacks0, c.timeout, redisErrs-redisErrs0)
	fmt.Fprintf(stdout, "\n%s\n%s", tbl, extra)
	if c.out == "" {
		return nil
	}
	bodyMD := fmt.Sprintf("Measured %s with `%s` (median of %d runs of %v per contender in %v slices, alternated; %d tenants each with "+
		"its own API key, a plan of 1000/s and a hard monthly quota; the api runs in the same process as the load generator, "+
		"with Postgres and Redis on the same machine; limiter timeout %v so that every decision is Redis's, see -timeout).\n\nMachine: %s.\n\n%s\n%s\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), c.command, c.runs, c.duration, c.slice, c.tenants, c.timeout, m, tbl, extra, httpNotes)
	if err := writeSection(c.out, "check-http", "POST /v1/check over HTTP", bodyMD); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote the \"POST /v1/check over HTTP\" section of %s\n", c.out)
	return nil
}

const httpNotes = `
Target (limiter.md): at 32 concurrent clients over 10,000 tenants, at least the ≈ 8.9k decisions/s
and a p99 under the 11.6 ms that envoyproxy/ratelimit's ` + "`POST /json`" + ` (fixed window, no
authentication, no quota) gave on these machines. Each check here authenticates the API key
(in-process cache, filled from Postgres), decides rate and quota in one Redis script and answers
JSON with the rate-limit headers. GET /healthz is the same server's floor without any decision.
`

// seedTenants creates a bench plan and n tenants with one key each.
func seedTenants(ctx context.Context, ents *entitlements.Service, cat *catalogue.Service, creds *credentials.Service, runID string, n int) ([]string, error) {
	f64 := func(f float64) *float64 { return &f }
	i64 := func(n int64) *int64 { return &n }
	plan := "bench-" + runID
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: "Bench " + runID,
		Rate:   &catalogue.RateInput{PerSecond: f64(benchRate), Burst: i64(benchRate)},
		Quotas: map[string]*catalogue.QuotaInput{keyspace.DefaultMeter: {Limit: i64(1 << 40), Mode: string(limiter.ModeHard)}},
	}); err != nil {
		return nil, fmt.Errorf("bench: plan: %w", err)
	}
	keys := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range keys {
		g.Go(func() error {
			t, err := ents.CreateTenant(gctx, entitlements.TenantInput{Name: fmt.Sprintf("bench-%s-%05d", runID, i), Plan: plan})
			if err != nil {
				return fmt.Errorf("bench: tenant: %w", err)
			}
			k, err := creds.IssueKey(gctx, t.ID, "bench")
			if err != nil {
				return fmt.Errorf("bench: key: %w", err)
			}
			keys[i] = k.Key
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return keys, nil
}

// deleteBenchTenants removes what seedTenants made: the bench plan and its
// tenants, with their keys, versions and usage (entitlements.PurgePlan).
func deleteBenchTenants(ctx context.Context, ents *entitlements.Service, runID string) error {
	_, err := ents.PurgePlan(ctx, "bench-"+runID)
	return err
}

// limiterCounts reads, from the api's metrics, the decisions made by a fail
// mode and the limiter's Redis errors so far.
func limiterCounts(reg *prometheus.Registry) (fallbacks, redisErrors int64) {
	mfs, err := reg.Gather()
	if err != nil {
		return -1, -1
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "tollgate_limiter_decisions_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "fallback" && l.GetValue() != "none" {
						fallbacks += int64(m.GetCounter().GetValue())
					}
				}
			case "tollgate_limiter_redis_errors_total":
				redisErrors += int64(m.GetCounter().GetValue())
			}
		}
	}
	return fallbacks, redisErrors
}
