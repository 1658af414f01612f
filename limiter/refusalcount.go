package limiter

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// refusalFlushEvery is how often refusals decided without Redis (answered
// from the local refusal cache, or by the local fail mode while Redis is
// down) are added to the Redis counters. They are counted in memory first
// so that a tenant hammering past its limit still costs no Redis work per
// request, and a refusal made in an outage is not lost, yet every 429 shows
// on the dashboard (about a second late, or once Redis answers again).
const refusalFlushEvery = time.Second

// refusalTally counts refusals decided without Redis per Redis refusal hash (tenant and
// UTC day) and policy until the next flush.
type refusalTally struct {
	mu     sync.Mutex
	counts map[string]map[string]int64
}

func (t *refusalTally) add(key, policy string) {
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[string]map[string]int64{}
	}
	m := t.counts[key]
	if m == nil {
		m = map[string]int64{}
		t.counts[key] = m
	}
	m[policy]++
	t.mu.Unlock()
}

func (t *refusalTally) take() map[string]map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts
	t.counts = nil
	return c
}

// putBack returns counts a failed flush could not write, so that the next
// flush tries them again.
func (t *refusalTally) putBack(c map[string]map[string]int64) {
	for key, m := range c {
		for policy, n := range m {
			t.mu.Lock()
			if t.counts == nil {
				t.counts = map[string]map[string]int64{}
			}
			if t.counts[key] == nil {
				t.counts[key] = map[string]int64{}
			}
			t.counts[key][policy] += n
			t.mu.Unlock()
		}
	}
}

// countLocalRefusal notes a refusal decided without Redis; rfBase is the
// plan's refusal key base, completed with the UTC day of the refusal as the
// script does (a refusal flushed after midnight still counts on its day).
func (l *Limiter) countLocalRefusal(rfBase, policy string, now time.Time) {
	l.tally.add(rfBase+now.UTC().Format("20060102"), policy)
}

// flushRefusals adds the refusals decided without Redis since the last
// flush (answered from the local refusal cache, or refused by the local fail
// mode) to the Redis counters that the dashboard reads. The Limiter does it
// every second and once more in Close; tests and callers that need the
// figure at once may call it. On error (Redis still down) the counts are
// kept for the next flush.
func (l *Limiter) flushRefusals(ctx context.Context) error {
	c := l.tally.take()
	if len(c) == 0 {
		return nil
	}
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for key, m := range c {
			var total int64
			for policy, n := range m {
				p.HIncrBy(ctx, key, policy, n)
				total += n
			}
			p.Expire(ctx, key, 40*24*time.Hour) // as the script: 40 days
			if t, ok := refusalTenant(key); ok {
				// the worker finds the hash through its dirty mark
				p.ZIncrBy(ctx, l.keys.dirtyBase(t)+"rf", float64(total), key)
				p.Expire(ctx, l.keys.dirtyBase(t)+"rf", 40*24*time.Hour)
			}
		}
		return nil
	})
	if err != nil {
		l.tally.putBack(c)
		if h := l.opts.Hooks.OnRedisError; h != nil {
			h("refusals", err)
		}
		return err
	}
	return nil
}

// flushRefusalsLoop runs until ctx ends, then flushes one last time.
func (l *Limiter) flushRefusalsLoop(ctx context.Context) {
	t := time.NewTicker(refusalFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = l.flushRefusals(fctx) // best effort at shutdown
			_ = l.flushCharges(fctx)
			l.leave(fctx)
			cancel()
			return
		case <-t.C:
			if l.redisDown() {
				continue // kept for a tick that finds Redis answering
			}
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = l.flushRefusals(fctx) // kept for the next tick on error
			_ = l.flushCharges(fctx)
			_ = l.heartbeat(fctx)
			cancel()
		}
	}
}

// refusalTenant returns the tenant of a refusal hash name
// "<p>:{t:<tenant>}:rf:<day>".
func refusalTenant(key string) (string, bool) {
	i := strings.Index(key, ":{t:")
	if i < 0 {
		return "", false
	}
	rest := key[i+4:]
	j := strings.Index(rest, "}:rf:")
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}
