package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher pipelines the decision scripts of concurrent Allow calls by
// natural batching (group commit): no timer and no wait. A decision that
// finds fewer than maxPipelines pipelines in flight is sent at once, on its
// own goroutine; decisions arriving while they are in flight queue up and
// are sent together, as one pipeline (split per node by a Cluster client),
// as soon as one returns. One goroutine adds no latency; many share round
// trips. Two in flight keep Redis busy with one batch while the replies of
// the other are handed out and the next is gathered (with one, Redis and
// the client took turns idling).
type batcher struct {
	l   *Limiter
	ctx context.Context // ends at Close
	max int

	mu       sync.Mutex
	queue    []*batchReq
	inFlight int // pipelines in flight; whoever sends one sends the queue next
}

// maxPipelines is how many pipelines of one Limiter may be in flight.
const maxPipelines = 2

type batchReq struct {
	script *redis.Script
	keys   []string
	args   []any
	res    []any
	err    error
	done   chan struct{}
}

func newBatcher(ctx context.Context, l *Limiter, max int) *batcher {
	return &batcher{l: l, ctx: ctx, max: max}
}

var batchReqPool = sync.Pool{New: func() any { return &batchReq{done: make(chan struct{}, 1)} }}

func (b *batcher) do(ctx context.Context, script *redis.Script, keys []string, args []any) ([]any, error) {
	r := batchReqPool.Get().(*batchReq)
	r.script, r.keys, r.args = script, keys, args
	b.mu.Lock()
	if b.inFlight >= maxPipelines {
		// Ride on the next pipeline. Every pipeline is bounded by
		// Options.Timeout, so the wait is too.
		b.queue = append(b.queue, r)
		b.mu.Unlock()
		<-r.done
	} else {
		b.inFlight++
		b.mu.Unlock()
		b.flushOne(ctx, r)
		<-r.done
		// Whoever queued meanwhile goes next, sent from another goroutine so
		// that this decision returns now.
		if next := b.next(); next != nil {
			go b.loop(next)
		}
	}
	res, err := r.res, r.err
	r.script, r.keys, r.args, r.res, r.err = nil, nil, nil, nil, nil
	batchReqPool.Put(r)
	return res, err
}

// next takes up to max queued requests for the pipeline that just
// returned, or ends that pipeline's turn when there are none.
func (b *batcher) next() []*batchReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inFlight--
		return nil
	}
	n := min(len(b.queue), b.max)
	batch := make([]*batchReq, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch
}

// loop sends batches until the queue is empty.
func (b *batcher) loop(batch []*batchReq) {
	for batch != nil {
		b.flush(batch)
		batch = b.next()
	}
}

// flush sends one batch and hands every request its reply.
func (b *batcher) flush(batch []*batchReq) {
	if b.ctx.Err() != nil {
		for _, r := range batch {
			r.err = ErrClosed
			r.done <- struct{}{}
		}
		return
	}
	if len(batch) == 1 {
		b.flushOne(b.ctx, batch[0])
		return
	}
	cmds := make([]*redis.Cmd, len(batch))
	err := b.l.call(b.ctx, "decide", func(ctx context.Context) error {
		pipe := b.l.rdb.Pipeline()
		for i, r := range batch {
			cmds[i] = r.script.EvalSha(ctx, pipe, r.keys, r.args...)
		}
		_, err := pipe.Exec(ctx)
		if err == nil || !isNoScript(err) {
			return err
		}
		// NOSCRIPT (after a restart, failover or SCRIPT FLUSH): load and
		// run the ones that missed one by one.
		for i, r := range batch {
			if cmds[i].Err() != nil && isNoScript(cmds[i].Err()) {
				cmds[i] = r.script.Run(ctx, b.l.rdb, r.keys, r.args...)
			}
		}
		return nil
	})
	for i, r := range batch {
		if abandoned(err) {
			r.err = err // cmds may still be written by the abandoned call
		} else if cmds[i] != nil {
			r.res, r.err = cmds[i].Slice()
			if r.err != nil && !errors.Is(r.err, redis.Nil) {
				r.err = fmt.Errorf("limiter: decide: %w", r.err)
			}
		} else {
			r.err = errors.New("limiter: decide: no reply")
		}
		r.done <- struct{}{}
	}
}

// flushOne sends a batch of one as a plain EVALSHA: a pipeline of one
// would cost the same round trip with more work. ctx is the caller's when
// the decision goes alone.
func (b *batcher) flushOne(ctx context.Context, r *batchReq) {
	var res []any // not r.res: an abandoned call may write it late
	r.err = b.l.call(ctx, "decide", func(ctx context.Context) error {
		var err error
		res, err = r.script.Run(ctx, b.l.rdb, r.keys, r.args...).Slice()
		return err
	})
	if r.err == nil {
		r.res = res
	}
	r.done <- struct{}{}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
