package limiter_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestFastScriptDecidesAsGeneral: the common plan (a token bucket and one
// quota) is decided by a flat script of its own; the same requests on the
// same snapshot through the general script give the same decisions, the
// same state hash (but the bucket's time), the same dirty marks and the
// same refusal counts.
func TestFastScriptDecidesAsGeneral(t *testing.T) {
	now := time.Now().UTC()
	period := func(end time.Time) func(*limiter.Snapshot) {
		return func(s *limiter.Snapshot) {
			s.PeriodStart, s.PeriodEnd, s.NextPeriodEnd = end.AddDate(0, -1, 0), end, end.AddDate(0, 1, 0)
		}
	}
	for _, tc := range []struct {
		name  string
		rate  limiter.Rate
		quota limiter.Quota
		end   time.Time // period end
		costs []int64
		flush bool // mark the counter flushed (f = q) halfway
	}{
		{"quota refuses", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 1000}, limiter.Quota{Limit: 5}, now.Add(48 * time.Hour), []int64{1, 1, 1, 1, 1, 1, 2}, false},
		{"rate refuses", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 3}, limiter.Quota{Limit: 100}, now.Add(48 * time.Hour), []int64{1, 1, 1, 1, 2}, false},
		{"both refuse", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 2}, limiter.Quota{Limit: 2}, now.Add(48 * time.Hour), []int64{2, 1, 3}, false},
		{"soft quota", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 1000}, limiter.Quota{Limit: 2, Mode: limiter.ModeSoft}, now.Add(48 * time.Hour), []int64{1, 1, 1, 5}, false},
		{"next period", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 1000}, limiter.Quota{Limit: 3}, now.Add(-time.Minute), []int64{1, 1, 1, 1}, false},
		{"flushed counter", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 1000}, limiter.Quota{Limit: 100}, now.Add(48 * time.Hour), []int64{1, 2, 0, 3, 1}, true},
		{"zero cost", limiter.Rate{PerSecond: 1.0 / 3600, Burst: 1000}, limiter.Quota{Limit: 1}, now.Add(48 * time.Hour), []int64{0, 1, 0, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				ctx := context.Background()
				rdb := b.client()
				opts := limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, DisableRefusalCache: true}
				fast := newLimiter(t, rdb, opts)
				general := newLimiter(t, rdb, limiter.GeneralScript(opts))
				st := limitstore.New(b.client(), b.prefix)
				mk := func(tenant string) {
					put(t, st, snapshot(tenant, func(s *limiter.Snapshot) {
						r := tc.rate
						s.Rate = &r
						s.Quotas = map[string]limiter.Quota{"requests": tc.quota}
						period(tc.end)(s)
					}))
				}
				mk("fs-a")
				mk("fs-b")
				for i, c := range tc.costs {
					if tc.flush && i == len(tc.costs)/2 {
						for _, tn := range []string{"fs-a", "fs-b"} {
							markFlushed(t, rdb, b.prefix, tn)
						}
					}
					da, err := fast.Allow(ctx, "fs-a", limiter.Request{Cost: c})
					if err != nil {
						t.Fatal(err)
					}
					db, err := general.Allow(ctx, "fs-b", limiter.Request{Cost: c})
					if err != nil {
						t.Fatal(err)
					}
					if a, g := decisionText(da), decisionText(db); a != g || !timesClose(da, db) {
						t.Fatalf("request %d (cost %d):\nfast    %s %v\ngeneral %s %v", i, c, a, times(da), g, times(db))
					}
				}
				if a, g := redisText(t, rdb, b.prefix, "fs-a"), redisText(t, rdb, b.prefix, "fs-b"); a != g {
					t.Fatalf("Redis after the requests:\nfast    %s\ngeneral %s", a, g)
				}
			})
		})
	}
}

// decisionText prints a decision but its durations (times).
func decisionText(d *limiter.Decision) string {
	s := fmt.Sprintf("allowed=%v policy=%s", d.Allowed, d.Policy)
	for _, p := range d.Policies {
		s += fmt.Sprintf(" [%s limit=%d rem=%d window=%v mode=%s]", p.Name, p.Limit, p.Remaining, p.Window, p.Mode)
	}
	return s
}

// times returns a decision's retry and resets.
func times(d *limiter.Decision) []time.Duration {
	ts := []time.Duration{d.RetryAfter}
	for _, p := range d.Policies {
		ts = append(ts, p.Reset)
	}
	return ts
}

// timesClose: the two scripts run a little apart in time, so their
// durations may differ by that much (a loaded machine: up to seconds).
func timesClose(a, b *limiter.Decision) bool {
	ta, tb := times(a), times(b)
	if len(ta) != len(tb) {
		return false
	}
	for i := range ta {
		if d := ta[i] - tb[i]; d > 5*time.Second || d < -5*time.Second {
			return false
		}
	}
	return true
}

// redisText prints what the tenant's decisions left in Redis, the tenant's
// name replaced: the state hash (the bucket's time to the second), the
// dirty marks naming it and its refusal counts.
func redisText(t *testing.T, rdb redis.UniversalClient, prefix, tenant string) string {
	t.Helper()
	ctx := context.Background()
	tag := "{t:" + tenant + "}"
	var out []string
	h, err := rdb.HGetAll(ctx, prefix+":"+tag+":st").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if k == "r" || k == "x" {
			v = v[:min(len(v), 6)] // µs / ms timestamps: compare their leading digits
		}
		out = append(out, "st "+k+"="+v)
	}
	keys, err := allKeys(ctx, rdb, prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		switch typ := rdb.Type(ctx, k).Val(); {
		case strings.Contains(k, tag+":rf:"):
			for f, v := range rdb.HGetAll(ctx, k).Val() {
				out = append(out, "refusals "+f+"="+v)
			}
		case strings.Contains(k, ":dirty:") && typ == "set":
			for _, m := range rdb.SMembers(ctx, k).Val() {
				if strings.Contains(m, tag) {
					out = append(out, "dirty "+strings.ReplaceAll(m, tag, "{t:*}"))
				}
			}
		case strings.Contains(k, ":dirty:") && typ == "zset":
			for _, m := range rdb.ZRangeWithScores(ctx, k, 0, -1).Val() {
				if s := m.Member.(string); strings.Contains(s, tag) {
					out = append(out, fmt.Sprintf("dirty %s=%v", strings.ReplaceAll(s, tag, "{t:*}"), m.Score))
				}
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// markFlushed does what a flush does to the tenant's counters (f = q) and
// drops its dirty marks.
func markFlushed(t *testing.T, rdb redis.UniversalClient, prefix, tenant string) {
	t.Helper()
	ctx := context.Background()
	key := prefix + ":{t:" + tenant + "}:st"
	for k, v := range rdb.HGetAll(ctx, key).Val() {
		if strings.HasPrefix(k, "q:") {
			if err := rdb.HSet(ctx, key, "f:"+k[2:], v).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys, err := allKeys(ctx, rdb, prefix+"*dirty*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if rdb.Type(ctx, k).Val() == "set" {
			for _, m := range rdb.SMembers(ctx, k).Val() {
				if strings.Contains(m, "{t:"+tenant+"}") {
					rdb.SRem(ctx, k, m)
				}
			}
		}
	}
}

// allKeys scans every node (a Cluster's too) for keys matching pattern.
func allKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu = make(chan struct{}, 1)
		mu <- struct{}{}
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			var ks []string
			it := n.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) {
				ks = append(ks, it.Val())
			}
			<-mu
			keys = append(keys, ks...)
			mu <- struct{}{}
			return it.Err()
		})
	case *redis.Client:
		err = scan(ctx, c)
	}
	sort.Strings(keys)
	return keys, err
}
