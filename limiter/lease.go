package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// This file holds concurrency slots and gives them back.

// lease is a concurrency slot held in Redis or in process.
type lease struct {
	l     *Limiter
	key   string
	id    string
	local *localState
	done  atomic.Bool
}

func (ls *lease) release(ctx context.Context) error {
	if ls.done.Swap(true) {
		return nil
	}
	if ls.local != nil {
		ls.local.releaseConc()
		return nil
	}
	err := ls.l.call(ctx, "release", func(ctx context.Context) error {
		return ls.l.rdb.ZRem(ctx, ls.key, ls.id).Err()
	})
	if errors.Is(err, errRedisDown) {
		return fmt.Errorf("%w (the slot expires after LeaseTTL)", ErrUnavailable)
	}
	return err
}
