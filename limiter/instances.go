package limiter

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file keeps the heartbeats that say how many instances share the
// limits a fail mode decides locally: each Limiter refreshes its member of
// one sorted set (scored by the Redis time of its last beat) on the flush
// tick while Redis answers, and reads how many beat in the last
// instanceTTL. The last figure read stays in use through an outage, never
// below Options.ExpectedInstances, so that two instances left at the
// default of 1 do not each spend a whole remainder.

// instanceTTL is how long an instance counts as alive after its last beat.
const instanceTTL = 5 * time.Second

// heartbeatScript beats and counts. KEYS: the set. ARGV: member, TTL ms.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
`)

// heartbeat beats once and updates the count of live instances.
func (l *Limiter) heartbeat(ctx context.Context) error {
	n, err := heartbeatScript.Run(ctx, l.rdb, []string{l.keys.instances()}, l.id, strconv.FormatInt(instanceTTL.Milliseconds(), 10)).Int64()
	if err != nil {
		return err
	}
	l.live.Store(max(n, int64(l.opts.ExpectedInstances)))
	return nil
}

// leave removes this instance's beat (Close), so that the others' shares
// grow at once.
func (l *Limiter) leave(ctx context.Context) {
	_ = l.rdb.ZRem(ctx, l.keys.instances(), l.id).Err()
}

// instances is the divisor of limits decided locally.
func (l *Limiter) instances() int {
	return int(max(l.live.Load(), int64(l.opts.ExpectedInstances), 1))
}
