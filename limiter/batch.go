package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher pipelines the decision scripts of concurrent Allow calls: the
// first call of a batch waits up to the window for others, then all go to
// Redis in one pipeline (one per node on a Cluster).
type batcher struct {
	l      *Limiter
	window time.Duration
	max    int
	in     chan *batchReq
}

type batchReq struct {
	ctx  context.Context
	keys []string
	args []any
	res  []any
	err  error
	done chan struct{}
}

func newBatcher(l *Limiter, window time.Duration, max int) *batcher {
	return &batcher{l: l, window: window, max: max, in: make(chan *batchReq, max)}
}

func (b *batcher) do(ctx context.Context, keys []string, args []any) ([]any, error) {
	r := &batchReq{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	select {
	case b.in <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	<-r.done // the batch is bounded by Options.Timeout
	return r.res, r.err
}

func (b *batcher) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var first *batchReq
		select {
		case <-ctx.Done():
			b.drain()
			return
		case first = <-b.in:
		}
		batch := []*batchReq{first}
		timer.Reset(b.window)
	collect:
		for len(batch) < b.max {
			select {
			case r := <-b.in:
				batch = append(batch, r)
			case <-timer.C:
				break collect
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		go b.flush(ctx, batch)
	}
}

func (b *batcher) drain() {
	for {
		select {
		case r := <-b.in:
			r.err = ErrClosed
			close(r.done)
		default:
			return
		}
	}
}

func (b *batcher) flush(ctx context.Context, batch []*batchReq) {
	cmds := make([]*redis.Cmd, len(batch))
	err := b.l.call(ctx, "decide", func(ctx context.Context) error {
		pipe := b.l.rdb.Pipeline()
		for i, r := range batch {
			cmds[i] = decideScript.EvalSha(ctx, pipe, r.keys, r.args...)
		}
		_, err := pipe.Exec(ctx)
		if err == nil || !isNoScript(err) {
			return err
		}
		// NOSCRIPT (after a restart, failover or SCRIPT FLUSH): load and
		// run the ones that missed one by one.
		for i, r := range batch {
			if cmds[i].Err() != nil && isNoScript(cmds[i].Err()) {
				cmds[i] = decideScript.Run(ctx, b.l.rdb, r.keys, r.args...)
			}
		}
		return nil
	})
	for i, r := range batch {
		if errors.Is(err, errRedisDown) {
			r.err = err
		} else if cmds[i] != nil {
			r.res, r.err = cmds[i].Slice()
			if r.err != nil {
				r.err = fmt.Errorf("limiter: decide: %w", r.err)
			}
		} else {
			r.err = errors.New("limiter: decide: no reply")
		}
		close(r.done)
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
