package limiterbench

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limitertest"
	"github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"
)

// BenchmarkScriptCost measures what a decision costs Redis itself, which
// bounds the decisions one Redis core can serve: the time Redis reports
// spending in the script (INFO commandstats usec for EVALSHA, the scripted
// commands included) and the commands it ran, per decision. Client-side
// noise (a loaded machine) moves ops/s a lot and these figures little.
// Sub-benchmarks: redis_rate v10 Allow (the anchor), our full decision
// (rate + monthly quota) from the near-cache and by reference (a near-cache
// of one entry over 1,000 tenants), explicit rate-only Limits, and the
// full decision again for tenants whose snapshots carry notification
// thresholds (issue 27: "-notify" against the same name without; the
// thresholds ride in the snapshot for the flush and decisions never read
// them, so the ratio should be 1.00), and for tenants with two active grants
// (issue 26: "-grants2" within the included quota, "-grants2-drawing" with it
// used up, against "tollgate": at most 1.15×).
//
//	go test -run '^$' -bench BenchmarkScriptCost -benchtime 20000x ./limiter/
func BenchmarkScriptCost(b *testing.B) {
	addr, cg := scriptCostServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	tenants := benchTenants(1000)
	notified := benchTenants(len(tenants)) // as many more, with thresholds
	now := time.Now().UTC()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	thresholds := map[string][]keyspace.QuotaThreshold{keyspace.DefaultMeter: {{Percent: 50}, {Percent: 80}, {Percent: 100}, {Units: 5000}}}
	granted := benchTenants(len(tenants)) // as many more, with two grants
	drawing := benchTenants(len(tenants)) // and as many whose included quota is used up
	for i, t := range tenants {
		for _, id := range []string{t, notified[i], granted[i], drawing[i]} {
			snap := limiter.Snapshot{
				TenantID: id, Plan: "bench", Status: "active", Version: 1,
				Rate:        &limiter.Rate{PerSecond: 1e6, Burst: 1e6},
				Quotas:      map[string]limiter.Quota{keyspace.DefaultMeter: {Limit: 1 << 40, Mode: limiter.ModeHard}},
				PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), NextPeriodEnd: start.AddDate(0, 2, 0),
			}
			if id == notified[i] {
				snap.Notify = thresholds
			}
			if id == drawing[i] {
				snap.Quotas[keyspace.DefaultMeter] = limiter.Quota{Limit: 0, Mode: limiter.ModeHard}
			}
			limitertest.PutSnapshot(b, rdb, "", snap)
			if id == granted[i] || id == drawing[i] {
				gs := []keyspace.Grant{
					{ID: "promo-" + id, Meter: keyspace.DefaultMeter, EffectiveAt: start, ExpiresAt: start.AddDate(1, 0, 0), Remaining: 1 << 40},
					{ID: "topup-" + id, Meter: keyspace.DefaultMeter, EffectiveAt: start, Remaining: 1 << 40},
				}
				if err := (keyspace.Keys{}).PutGrants(ctx, rdb, id, func(context.Context) ([]keyspace.Grant, error) { return gs, nil }); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	ours := func(cacheSize int, req limiter.Request, ids ...string) func(int) error {
		if len(ids) == 0 {
			ids = tenants
		}
		l, err := limiter.New(rdb, limiter.Options{Timeout: time.Second, CacheSize: cacheSize})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return func(i int) error {
			_, err := l.Allow(ctx, ids[i%len(ids)], req)
			return err
		}
	}
	rl := redis_rate.NewLimiter(rdb)
	for _, c := range []struct {
		name string
		op   func(int) error
	}{
		{"redis_rate", func(i int) error {
			_, err := rl.Allow(ctx, tenants[i%len(tenants)], redis_rate.PerSecond(1e6))
			return err
		}},
		{"tollgate", ours(0, limiter.Request{Cost: 1})},
		{"tollgate-byref", ours(1, limiter.Request{Cost: 1})},
		{"tollgate-rate", ours(0, limiter.Request{Cost: 1, Limits: &limiter.Limits{Rate: &limiter.Rate{PerSecond: 1e6, Burst: 1e6}}})},
		{"tollgate-notify", ours(0, limiter.Request{Cost: 1}, notified...)},
		{"tollgate-byref-notify", ours(1, limiter.Request{Cost: 1}, notified...)},
		// issue 26: two active grants beside the included quota (≤ 1.15×
		// "tollgate"), and the same drawing from them (included used up)
		{"tollgate-grants2", ours(0, limiter.Request{Cost: 1}, granted...)},
		{"tollgate-grants2-drawing", ours(0, limiter.Request{Cost: 1}, drawing...)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < 2*len(tenants); i++ { // every key and cache entry exists
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cg.Zero(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.op(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if ir := cg.Dump(b); ir > 0 {
				b.ReportMetric(float64(ir)/float64(b.N), "redis-instr/op")
			}
			calls, usec := scriptStats(b, rdb)
			b.ReportMetric(float64(usec["evalsha"]+usec["eval"])/float64(b.N), "redis-µs/op")
			var total int64
			for name, n := range calls {
				if name != "info" && name != "config|resetstat" {
					total += n
				}
			}
			b.ReportMetric(float64(total)/float64(b.N), "redis-cmds/op")
		})
	}
}

// scriptCostServer returns the Redis to measure: SCRIPTCOST_REDIS (with
// SCRIPTCOST_CALLGRIND_PID and _OUT when it runs under callgrind,
// scripts/scriptcost.sh), or a private redis-server.
func scriptCostServer(b *testing.B) (string, redisproc.Callgrind) {
	if addr := os.Getenv("SCRIPTCOST_REDIS"); addr != "" {
		return addr, redisproc.CallgrindFromEnv("SCRIPTCOST")
	}
	return redisproc.StartServer(b).Addr, redisproc.Callgrind{}
}

// scriptStats reads INFO commandstats: calls and usec per command.
func scriptStats(b *testing.B, rdb *redis.Client) (calls, usec map[string]int64) {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	calls, usec = map[string]int64{}, map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		name, fields, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "cmdstat_"), ":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls[name] = n
			case "usec":
				usec[name] = n
			}
		}
	}
	return calls, usec
}
