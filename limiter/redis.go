package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file bounds every Redis call by Options.Timeout and tracks the
// cooldown during which decisions go straight to the fail modes.

// errRedisDown marks a decision that must go to the fail modes.
var errRedisDown = errors.New("limiter: redis down")

// errLoaderDown marks a snapshot the Loader failed to give (not an unknown
// tenant): the decision goes to the fail modes too.
var errLoaderDown = errors.New("limiter: snapshot loader failed")

func (l *Limiter) redisDown() bool {
	u := l.downUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// call runs one Redis call bounded by Options.Timeout. A failure of Redis
// (not of the caller's context) starts the cooldown and returns an error
// wrapping errRedisDown; server replies that are bugs (ERR, WRONGTYPE) are
// returned as they are.
func (l *Limiter) call(ctx context.Context, op string, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	var err error
	if l.ctxTimeouts {
		err = fn(cctx)
	} else {
		ch := make(chan error, 1)
		go func() { ch <- fn(cctx) }()
		select {
		case err = <-ch:
		case <-cctx.Done():
			err = cctx.Err()
		}
	}
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if h := l.opts.Hooks.OnRedisError; h != nil {
		h(op, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "WRONGTYPE") {
			return fmt.Errorf("limiter: %s: %w", op, err)
		}
	}
	l.downUntil.Store(time.Now().Add(l.opts.Cooldown).UnixNano())
	return fmt.Errorf("%w: %s: %w", errRedisDown, op, err)
}

// abandoned says that call returned without waiting for its function
// (timeout, cancellation): what the function writes must not be read.
func abandoned(err error) bool {
	return errors.Is(err, errRedisDown) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
