package limiter

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// subscribe follows the invalidation channel until ctx ends. Every
// (re)subscription and every loss of the subscription makes the whole
// near-cache stale, since invalidations may have been missed meanwhile.
func (l *Limiter) subscribe(ctx context.Context) {
	ps := l.pubsub
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Quiet channel: ping so that a dead connection shows up as an error.
				_ = ps.Ping(ctx)
				continue
			}
			if l.cache.isSubscribed() {
				l.dropAll(false)
			}
			if h := l.opts.Hooks.OnRedisError; h != nil {
				h("subscribe", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			if backoff < time.Second {
				backoff *= 2
			}
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				l.dropAll(true)
			}
		case *redis.Message:
			tenant, version := keyspace.ParseInvalidation(m.Payload)
			l.cache.invalidate(tenant, version)
			l.aliases.invalidate(tenant)
			l.dropRefusals(tenant)
			if l.leases != nil {
				l.leases.revoke(tenant)
			}
			if h := l.opts.Hooks.OnInvalidation; h != nil {
				h(tenant, false)
			}
		}
	}
}

func (l *Limiter) dropAll(subscribed bool) {
	l.cache.dropAll(subscribed)
	l.aliases.invalidate("")
	// A lost subscription keeps the refusals: they are what the fail modes
	// know of exhausted tenants while Redis is away. A new subscription
	// (Redis answering again, invalidations maybe missed) drops them.
	if subscribed {
		l.dropRefusals("")
	}
	if h := l.opts.Hooks.OnInvalidation; h != nil {
		h("", true)
	}
}
