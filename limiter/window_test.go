package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// TestSnapshotFromAClockAheadResetsNothingEarly: a snapshot written by a
// server whose clock runs 10 minutes ahead names, 5 minutes before the
// period's end by Redis's clock, the next period as the current one. The
// decision goes by Redis's clock: it stays in the period Redis is in, whose
// exhausted quota keeps refusing, and counts nothing in the new period's
// counter before it begins.
func TestSnapshotFromAClockAheadResetsNothingEarly(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	boundary := now.UTC().Add(5 * time.Minute).Truncate(time.Second) // the period Redis is in ends here
	prev := boundary.AddDate(0, -1, 0)
	ahead := snapshot("ahead", func(s *limiter.Snapshot) {
		// what the writer 10 minutes ahead computed: the next period
		s.PrevPeriodStart, s.PeriodStart, s.PeriodEnd, s.NextPeriodEnd = prev, boundary, boundary.AddDate(0, 1, 0), boundary.AddDate(0, 2, 0)
		s.Rate = &limiter.Rate{PerSecond: 1000, Burst: 1000}
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 5, Mode: limiter.ModeHard}}
	})
	put(t, st, ahead)
	keys := keyspace.Keys{Prefix: b.prefix}
	rdb.HSet(ctx, keys.State("ahead"), keyspace.CounterOf("requests", prev).Used(), 5) // exhausted
	l := newLimiter(t, b.client(), limiter.Options{Prefix: b.prefix, DisableRefusalCache: true})
	d, err := l.Allow(ctx, "ahead", limiter.Request{Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Policy != "requests" {
		t.Fatalf("a snapshot 10 minutes ahead reset the quota early: %+v", d)
	}
	if d.RetryAfter > 6*time.Minute || d.RetryAfter < 4*time.Minute {
		t.Errorf("retry after %s, want the 5 minutes left of the period Redis is in", d.RetryAfter)
	}
	if _, ok, _ := st.Used(ctx, "ahead", "requests", boundary); ok {
		t.Error("the next period's counter was written before the period began")
	}
	// Another tenant in the same situation, not exhausted: counted in the
	// period Redis is in.
	put(t, st, snapshot("ahead2", func(s *limiter.Snapshot) { *s = ahead; s.TenantID = "ahead2" }))
	rdb.HSet(ctx, keys.State("ahead2"), keyspace.CounterOf("requests", prev).Used(), 2)
	if d, err := l.Allow(ctx, "ahead2", limiter.Request{Cost: 1}); err != nil || !d.Allowed || d.Policies[1].Remaining != 2 {
		t.Fatalf("%+v %v", d, err)
	}
	if used, _, _ := st.Used(ctx, "ahead2", "requests", prev); used != 3 {
		t.Errorf("the current period's counter is %d, want 3", used)
	}
}

// The general decision script (peeks, concurrency slots, or every plan
// with GeneralScript) goes by Redis's clock too.
func TestSnapshotFromAClockAheadGeneralScript(t *testing.T) {
	b := singleRedis(t)
	ctx := context.Background()
	rdb := b.client()
	st := newStore(rdb, b.prefix)
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	boundary := now.UTC().Add(5 * time.Minute).Truncate(time.Second)
	prev := boundary.AddDate(0, -1, 0)
	put(t, st, snapshot("ahead", func(s *limiter.Snapshot) {
		s.PrevPeriodStart, s.PeriodStart, s.PeriodEnd, s.NextPeriodEnd = prev, boundary, boundary.AddDate(0, 1, 0), boundary.AddDate(0, 2, 0)
		s.Rate = &limiter.Rate{PerSecond: 1000, Burst: 1000}
		s.Concurrency = 10
		s.Quotas = map[string]limiter.Quota{"requests": {Limit: 5, Mode: limiter.ModeHard}}
	}))
	keys := keyspace.Keys{Prefix: b.prefix}
	rdb.HSet(ctx, keys.State("ahead"), keyspace.CounterOf("requests", prev).Used(), 5)
	for name, tc := range map[string]struct {
		opt limiter.Options
		req limiter.Request
	}{
		"peek":             {limiter.Options{}, limiter.Request{Cost: 1, Peek: true}},
		"concurrency slot": {limiter.Options{}, limiter.Request{Cost: 1, Concurrency: true}},
		"general script":   {limiter.GeneralScript(limiter.Options{}), limiter.Request{Cost: 1}},
	} {
		tc.opt.Prefix, tc.opt.DisableRefusalCache = b.prefix, true
		l := newLimiter(t, b.client(), tc.opt)
		d, err := l.Allow(ctx, "ahead", tc.req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.Allowed || d.Policy != "requests" {
			t.Errorf("%s: a snapshot 10 minutes ahead reset the quota early: %+v", name, d)
		}
	}
	if _, ok, _ := st.Used(ctx, "ahead", "requests", boundary); ok {
		t.Error("the next period's counter was written before the period began")
	}
}
