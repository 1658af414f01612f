package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
)

// benchRate is every contender's per-tenant limit: high enough that no
// decision is refused (a refused request would be answered from our local
// refusal cache, which would flatter us).
const benchRate = 1000

// roundTrips counts client round trips: one per command and one per
// pipeline, as go-redis sends them.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// newClient returns a client with go-redis's default options (as an
// importer would have it) plus ContextTimeoutEnabled, which the limiter
// documents as the cheap way to bound calls, and a round-trip counter. Every
// contender gets its own, alike.
func newClient(url string) (*redis.Client, *roundTrips, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: -redis: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	return rdb, rt, nil
}

func benchPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "tgbench" + hex.EncodeToString(b[:])
}

// tenantIDs makes n UUID-shaped ids, like the server's.
func tenantIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		var b [16]byte
		_, _ = rand.Read(b[:])
		h := hex.EncodeToString(b[:])
		ids[i] = h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	return ids
}

func benchSnapshot(tenant string, now time.Time) limiter.Snapshot {
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	return limiter.Snapshot{
		TenantID: tenant, Plan: "bench", Status: "active", Version: 1,
		Rate:          &limiter.Rate{PerSecond: benchRate, Burst: benchRate},
		Quotas:        map[string]limiter.Quota{limiter.DefaultMeter: {Limit: 1 << 40, Mode: limiter.ModeHard}},
		PeriodStart:   start,
		PeriodEnd:     start.AddDate(0, 1, 0),
		NextPeriodEnd: start.AddDate(0, 2, 0),
	}
}

func benchDecisions(ctx context.Context, c config, stdout io.Writer) error {
	prefix := benchPrefix()
	admin, _, err := newClient(c.redisURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: redis at %s: %w", c.redisURL, err)
	}
	m := machine(ctx, admin)
	fmt.Fprintf(stdout, "machine: %s\nprefix: %s, %d tenants, goroutines %v, %d runs of %v per contender in %v slices\n",
		m, prefix, c.tenants, c.goroutines, c.runs, c.duration, c.slice)
	defer func() {
		// Delete everything the bench wrote, even after an interrupt.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		n, err := unlinkPrefixes(cctx, admin, prefix+"*", "rate:"+prefix+"*")
		if err != nil {
			fmt.Fprintf(stdout, "cleanup: %v\n", err)
			return
		}
		fmt.Fprintf(stdout, "cleanup: unlinked %d keys\n", n)
	}()

	tenants := tenantIDs(c.tenants)
	store := limitstore.New(admin, prefix)
	if err := seedSnapshots(ctx, store, tenants); err != nil {
		return err
	}
	pick := func(rng *mrand.Rand) string { return tenants[rng.IntN(len(tenants))] }

	var cs []contender
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	add := func(name string, mk func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error)) error {
		rdb, rt, err := newClient(c.redisURL)
		if err != nil {
			return err
		}
		op, closeFn, err := mk(rdb)
		if err != nil {
			rdb.Close()
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		closers = append(closers, func() {
			if closeFn != nil {
				closeFn()
			}
			rdb.Close()
		})
		cs = append(cs, contender{name: name, op: op, calls: rt.n.Load})
		return nil
	}
	want := func(name string) bool {
		if c.only == "" {
			return true
		}
		for _, n := range strings.Split(c.only, ",") {
			if n = strings.TrimSpace(n); n != "" && strings.Contains(name, n) {
				return true
			}
		}
		return false
	}
	ourDecision := func(batching time.Duration) func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error) {
		return func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error) {
			l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Batching: batching > 0, Timeout: c.timeout})
			if err != nil {
				return nil, nil, err
			}
			decide := func(ctx context.Context, tenant string) error {
				d, err := l.Allow(ctx, tenant, limiter.Request{Cost: 1})
				if err != nil {
					return err
				}
				if !d.Allowed || d.Fallback != "" {
					return fmt.Errorf("decision allowed=%v policy=%q fallback=%q", d.Allowed, d.Policy, d.Fallback)
				}
				return nil
			}
			op := func(ctx context.Context, rng *mrand.Rand) error { return decide(ctx, pick(rng)) }
			// Fill the near-cache as a running backend's would be.
			if err := warm(ctx, tenants, decide); err != nil {
				l.Close()
				return nil, nil, err
			}
			return op, func() { l.Close() }, nil
		}
	}
	steps := []struct {
		name string
		mk   func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error)
	}{
		{"go-redis PING (floor)", func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error) {
			return func(ctx context.Context, _ *mrand.Rand) error { return rdb.Ping(ctx).Err() }, nil, nil
		}},
		{"tollgate rate+quota", ourDecision(0)},
		{fmt.Sprintf("tollgate batching %v", c.batching), ourDecision(c.batching)},
		{"tollgate refused (hammering)", func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error) {
			// 100 tenants out of tokens (burst 1, one per 1000 s), hammered:
			// after each one's first refusal, refusals come from the local
			// refusal cache until their retry time, at no Redis cost.
			hammered := tenantIDs(100)
			now := time.Now().UTC()
			for _, t := range hammered {
				snap := benchSnapshot(t, now)
				snap.Rate = &limiter.Rate{PerSecond: 0.001, Burst: 1}
				if err := store.PutSnapshot(ctx, snap); err != nil {
					return nil, nil, err
				}
			}
			l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, Timeout: c.timeout})
			if err != nil {
				return nil, nil, err
			}
			decide := func(ctx context.Context, tenant string) error {
				_, err := l.Allow(ctx, tenant, limiter.Request{Cost: 1})
				return err
			}
			if err := warm(ctx, hammered, decide); err != nil { // takes each one's token
				l.Close()
				return nil, nil, err
			}
			return func(ctx context.Context, rng *mrand.Rand) error {
				d, err := l.Allow(ctx, hammered[rng.IntN(len(hammered))], limiter.Request{Cost: 1})
				if err == nil && (d.Allowed || d.Fallback != "") {
					err = fmt.Errorf("hammered tenant allowed=%v fallback=%q", d.Allowed, d.Fallback)
				}
				return err
			}, func() { l.Close() }, nil
		}},
		{"redis_rate v10 Allow", func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error) {
			rl := redis_rate.NewLimiter(rdb)
			lim := redis_rate.PerSecond(benchRate)
			return func(ctx context.Context, rng *mrand.Rand) error {
				res, err := rl.Allow(ctx, prefix+":"+pick(rng), lim)
				if err == nil && res.Allowed != 1 {
					err = errors.New("redis_rate refused")
				}
				return err
			}, nil, nil
		}},
		{"ulule/limiter v3 (redis store)", func(rdb *redis.Client) (func(context.Context, *mrand.Rand) error, func(), error) {
			st, err := ulredis.NewStoreWithOptions(rdb, ulule.StoreOptions{Prefix: prefix + ":ulule", MaxRetry: 3})
			if err != nil {
				return nil, nil, err
			}
			ul := ulule.New(st, ulule.Rate{Period: time.Second, Limit: benchRate})
			return func(ctx context.Context, rng *mrand.Rand) error {
				res, err := ul.Get(ctx, pick(rng))
				if err == nil && res.Reached {
					err = errors.New("ulule refused")
				}
				return err
			}, nil, nil
		}},
	}
	for _, s := range steps {
		if !want(s.name) {
			continue
		}
		if err := add(s.name, s.mk); err != nil {
			return err
		}
	}
	rows, err := alternate(ctx, c, cs, stdout)
	if err != nil {
		return err
	}
	tbl := table(rows, "redis_rate v10 Allow")
	fmt.Fprintf(stdout, "\n%s\n", tbl)
	if c.out == "" {
		return nil
	}
	body := fmt.Sprintf("Measured %s with `%s` (median of %d runs; each run gives every contender %v per goroutine count, "+
		"alternated in %v slices on the same Redis; %d tenants, each limited to %d/s so that nothing is refused; our limiter's timeout %v).\n\n"+
		"Machine: %s.\n\n%s\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), c.command, c.runs, c.duration, c.slice, c.tenants, benchRate, c.timeout, m, tbl, decisionNotes)
	if err := writeSection(c.out, "limiter", "Limiter decisions", body); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote the \"Limiter decisions\" section of %s\n", c.out)
	return nil
}

const decisionNotes = `
- *tollgate rate+quota* is the full decision: the tenant's token bucket and its monthly hard quota
  of the meter ` + "`requests`" + `, checked and taken in one Lua script (EVALSHA), the plan read from the
  in-process near-cache (filled before measuring, as in a running backend; entries older than the
  30 s safety TTL are read again, which is the small excess over 1.000 round trips).
- *tollgate batching* is the opt-in natural batching (` + "`limiter.Options.Batching`" + `, group commit, no
  timer): a decision that finds no pipeline in flight is sent at once from the caller's goroutine;
  decisions arriving while one is in flight go together in the next pipeline (two in flight at
  most). One pipeline counts as one round trip, hence < 1 round trip per decision at 32 goroutines.
  The name still shows the -batching flag's value, which now only switches the mode on.
- *tollgate refused (hammering)* is 100 tenants that used up their tokens (burst 1, one token per
  1000 s) and keep asking: refusals are answered from the local refusal cache until their retry
  time, so a hammering tenant costs no Redis work (round trips ≈ 0).
- The near-cache's safety re-read (30 s TTL) rides on the decision script itself, so the full
  decision is exactly one round trip and the entitlement lookup none.
- Machine noise: the same contender moves 2-3x between runs on these shared 2-core machines (see
  each run's figure); compare ratios within a run. Redis CPU per call, measured alone on a private
  redis-server with INFO commandstats: our script ≈ 24 µs, redis_rate's ≈ 13 µs; that is where
  the remaining gap is.
- *redis_rate* is go-redis/redis_rate v10.0.1 ` + "`Allow`" + ` with ` + "`redis_rate.PerSecond`" + ` (GCRA, rate only);
  *ulule/limiter* is v3.11.2 with its go-redis store (fixed window, rate only).
- Round trips are counted on the client with a go-redis hook (one per command, one per pipeline).
- Every contender has its own go-redis client with the library defaults plus
  ` + "`ContextTimeoutEnabled`" + `.
`

// warm makes one decision per tenant, 32 at a time, and again for those
// that failed (a cold start on a busy machine may pass the 50 ms timeout and
// fall back), until every tenant was decided by Redis or 5 passes failed.
func warm(ctx context.Context, tenants []string, decide func(context.Context, string) error) error {
	todo := tenants
	for pass := 0; len(todo) > 0; pass++ {
		var mu sync.Mutex
		var failed []string
		var last error
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(32)
		for _, t := range todo {
			g.Go(func() error {
				if err := decide(gctx, t); err != nil {
					mu.Lock()
					failed, last = append(failed, t), err
					mu.Unlock()
				}
				return nil
			})
		}
		_ = g.Wait()
		if err := ctx.Err(); err != nil {
			return err
		}
		if pass == 4 && len(failed) > 0 {
			return fmt.Errorf("warming up: %d tenants still failing: %w", len(failed), last)
		}
		todo = failed
	}
	return nil
}

func seedSnapshots(ctx context.Context, store *limitstore.Store, tenants []string) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	now := time.Now().UTC()
	for _, t := range tenants {
		g.Go(func() error { return store.PutSnapshot(ctx, benchSnapshot(t, now)) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("bench: seeding snapshots: %w", err)
	}
	return nil
}

// unlinkPrefixes deletes the keys matching the patterns with SCAN + UNLINK
// (never FLUSHDB: the Redis may be shared).
func unlinkPrefixes(ctx context.Context, rdb *redis.Client, patterns ...string) (int, error) {
	n := 0
	for _, p := range patterns {
		iter := rdb.Scan(ctx, 0, p, 1000).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := rdb.Unlink(ctx, batch...).Err()
			n += len(batch)
			batch = batch[:0]
			return err
		}
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				if err := flush(); err != nil {
					return n, err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return n, err
		}
		if err := flush(); err != nil {
			return n, err
		}
	}
	return n, nil
}
