package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/limiter"
)

// TestFastScriptDecidesAsGeneral: the common plan (a token bucket and one
// quota) is decided by a flat script of its own, from the near-cache
// (fastBody) and by reference (fastRefBody, a tenant missing from a full
// near-cache); the same requests on the same snapshot through the general
// scripts give the same decisions, the same state hash (but the bucket's
// time), the same dirty marks and the same refusal counts.
func TestFastScriptDecidesAsGeneral(t *testing.T) {
	// Whole seconds, as periods are (Stripe's and the anchors'): the limits
	// hash of a decision by reference keeps period starts in seconds.
	now := time.Now().UTC().Truncate(time.Second)
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
				one := opts
				one.CacheSize = 1
				// The by-reference limiters' client counts snapshot reads:
				// a decision by reference makes none.
				refRDB := b.client()
				gets := &commandCount{name: "get"}
				refRDB.AddHook(gets)
				fastRef := newLimiter(t, refRDB, one)
				generalRef := newLimiter(t, refRDB, limiter.GeneralScript(one))
				st := newStore(b.client(), b.prefix)
				mk := func(tenant string) {
					put(t, st, snapshot(tenant, func(s *limiter.Snapshot) {
						r := tc.rate
						s.Rate = &r
						s.Quotas = map[string]limiter.Quota{"requests": tc.quota}
						period(tc.end)(s)
					}))
				}
				tenants := []string{"fs-a", "fs-b", "fs-c", "fs-d"}
				lims := []*limiter.Limiter{fast, general, fastRef, generalRef}
				names := []string{"fast", "general", "fast by reference", "general by reference"}
				for _, tn := range append(tenants, "fs-fill") {
					mk(tn)
				}
				// The one-entry near-caches hold another tenant, and a peek of
				// a third limiter (it takes nothing) writes the limits hashes
				// of fs-c and fs-d: those two are decided by reference.
				for _, l := range lims[2:] {
					peek(t, l, "fs-fill")
				}
				for _, tn := range tenants[2:] {
					peek(t, fast, tn)
				}
				before := gets.n.Load()
				for i, c := range tc.costs {
					if tc.flush && i == len(tc.costs)/2 {
						for _, tn := range tenants {
							markFlushed(t, rdb, b.prefix, tn)
						}
					}
					var ds []*limiter.Decision
					for j, l := range lims {
						d, err := l.Allow(ctx, tenants[j], limiter.Request{Cost: c})
						if err != nil {
							t.Fatal(err)
						}
						ds = append(ds, d)
					}
					for j := 1; j < len(ds); j++ {
						if a, g := decisionText(ds[0]), decisionText(ds[j]); a != g || !timesClose(ds[0], ds[j]) {
							t.Fatalf("request %d (cost %d):\nfast    %s %v\n%s %s %v", i, c, a, times(ds[0]), names[j], g, times(ds[j]))
						}
					}
				}
				if n := gets.n.Load() - before; n != 0 {
					t.Fatalf("the one-entry limiters read %d snapshots: not every decision was by reference", n)
				}
				want := redisText(t, rdb, b.prefix, "fs-a")
				for j, tn := range tenants[1:] {
					if got := redisText(t, rdb, b.prefix, tn); got != want {
						t.Fatalf("Redis after the requests:\nfast    %s\n%s %s", want, names[j+1], got)
					}
				}
			})
		})
	}
}

// commandCount is a go-redis hook counting the single commands called name.
type commandCount struct {
	name string
	n    atomic.Int64
}

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == c.name {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// peek decides a peek (nothing taken) of tenant, which reads its
// snapshot into l's near-cache and writes its limits hash.
func peek(t *testing.T, l *limiter.Limiter, tenant string) {
	t.Helper()
	if _, err := l.Allow(context.Background(), tenant, limiter.Request{Peek: true}); err != nil {
		t.Fatal(err)
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

// TestByReferenceDecidesFromFastField: a common request by reference is
// decided from the limits hash's fq:<meter> field (fastRefBody), not from
// its general fields: with that field's limit made 0 the request is
// refused by the quota, while the general fields still say 100.
func TestByReferenceDecidesFromFastField(t *testing.T) {
	ctx := context.Background()
	b := singleRedis(t)
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	for _, tn := range []string{"ff-a", "ff-fill"} {
		put(t, st, snapshot(tn, func(s *limiter.Snapshot) {
			s.Rate = &limiter.Rate{PerSecond: 100, Burst: 100}
			s.Quotas = map[string]limiter.Quota{"requests": {Limit: 100, Mode: limiter.ModeHard}}
		}))
	}
	opts := limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second, CacheSize: 1, DisableRefusalCache: true}
	l := newLimiter(t, rdb, opts)
	peek(t, l, "ff-fill")
	peek(t, newLimiter(t, rdb, limiter.Options{Prefix: b.prefix, Timeout: 5 * time.Second}), "ff-a")
	// The first decision makes the counter (a missing one goes the general way).
	if d, err := l.Allow(ctx, "ff-a", limiter.Request{}); err != nil || !d.Allowed {
		t.Fatalf("first decision: %v %v", d, err)
	}
	key := b.prefix + ":{t:ff-a}:lim"
	f, err := rdb.HGet(ctx, key, "fq:requests").Bytes()
	if err != nil {
		t.Fatalf("the limits hash has no fq:requests: %v", err)
	}
	if len(f) < 64 {
		t.Fatalf("fq:requests is %d bytes", len(f))
	}
	f = slices.Clone(f)
	clear(f[16:24]) // the limit, a little-endian double: 0
	if err := rdb.HSet(ctx, key, "fq:requests", f).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(ctx, "ff-a", limiter.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Policy != "requests" {
		t.Fatalf("decision %s: want refused by the quota of fq:requests", decisionText(d))
	}
	// A peek is no common request: the general fields decide it.
	if d, err := l.Allow(ctx, "ff-a", limiter.Request{Peek: true}); err != nil || !d.Allowed {
		t.Fatalf("peek: %v %v, want allowed by the general fields", d, err)
	}
}
