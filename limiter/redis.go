package limiter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file bounds every Redis call by Options.Timeout and decides, on
// evidence, when Redis is down: only then do decisions go straight to the
// fail modes, until a probe finds Redis answering again.
//
// A slow answer is not an outage. What counts as Redis's wait starts when
// the call has a connection slot (the wait for one is the process's own
// queue, shed past Options.Timeout with ErrOverloaded); a deadline timer
// that fires late (the process waited for a CPU) extends the wait rather
// than blaming Redis. One call past its deadline fails over that decision
// only. Redis is down after a refused, reset or closed connection, or when
// at least half of at least healthMinCalls calls failed in the last
// healthWindow, or (a quiet instance) healthMinFailures failed in a row
// with nothing answered for healthQuiet. A call fails when neither it nor
// a PING on the limiter's own connection answered in time while the
// process had its CPU.

// errRedisDown marks a decision that must go to the fail modes.
var errRedisDown = errors.New("limiter: redis down")

// errGaveUp marks a call the caller stopped waiting for while it still
// runs (its deadline, or the caller's context).
var errGaveUp = fmt.Errorf("%w: no answer in time", errRedisDown)

// errGaveUpCtx is errGaveUp's twin for the caller's context ending: it
// is not a Redis failure.
var errGaveUpCtx = errors.New("limiter: the caller stopped waiting")

// errLoaderDown marks a snapshot the Loader failed to give (not an unknown
// tenant): the decision goes to the fail modes too.
var errLoaderDown = errors.New("limiter: snapshot loader failed")

const (
	healthWindow      = time.Second
	healthBuckets     = 10
	healthMinCalls    = 20
	healthMinFailures = 3
	healthQuiet       = 250 * time.Millisecond
)

// health is a sliding window of Redis call outcomes in healthBuckets
// buckets of healthWindow/healthBuckets each.
type health struct {
	mu      sync.Mutex
	slot    [healthBuckets]int64 // bucket's time index
	calls   [healthBuckets]int
	fails   [healthBuckets]int
	inARow  int       // failures since the last success
	lastOK  time.Time // the last success (or the Limiter's start)
	probing bool
}

// record notes one call's outcome and says whether Redis is now judged down.
func (h *health) record(now time.Time, failed bool) bool {
	idx := now.UnixNano() / int64(healthWindow/healthBuckets)
	h.mu.Lock()
	defer h.mu.Unlock()
	b := idx % healthBuckets
	if h.slot[b] != idx {
		h.slot[b], h.calls[b], h.fails[b] = idx, 0, 0
	}
	h.calls[b]++
	if !failed {
		h.inARow = 0
		h.lastOK = now
		return false
	}
	h.fails[b]++
	h.inARow++
	calls, fails := 0, 0
	for i := range h.slot {
		if idx-h.slot[i] < healthBuckets {
			calls += h.calls[i]
			fails += h.fails[i]
		}
	}
	if 2*fails >= calls && calls >= healthMinCalls {
		return true
	}
	// A quieter instance: failures in a row and nothing answered for a
	// while (a stall of the process or the network a moment long is not
	// an outage).
	return h.inARow >= healthMinFailures && now.Sub(h.lastOK) >= healthQuiet
}

func (h *health) reset() {
	h.mu.Lock()
	h.slot, h.calls, h.fails, h.inARow = [healthBuckets]int64{}, [healthBuckets]int{}, [healthBuckets]int{}, 0
	h.lastOK = time.Now()
	h.mu.Unlock()
}

func (l *Limiter) redisDown() bool { return l.down.Load() }

// markDown judges Redis down and starts the probe that brings it back.
func (l *Limiter) markDown() {
	if l.down.Swap(true) {
		return
	}
	l.health.mu.Lock()
	start := !l.health.probing
	l.health.probing = true
	l.health.mu.Unlock()
	if !start || l.closed.Load() {
		return
	}
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.probe() }()
}

// probe PINGs Redis every Options.Cooldown until it answers within
// Options.Timeout, then lets decisions use it again.
func (l *Limiter) probe() {
	defer func() {
		l.health.mu.Lock()
		l.health.probing = false
		l.health.mu.Unlock()
	}()
	t := time.NewTicker(l.opts.Cooldown)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, l.opts.Timeout)
		err := l.rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			l.health.reset()
			l.down.Store(false)
			return
		}
	}
}

// evidence says that an error is Redis (or the way to it) refusing,
// resetting or closing connections, not just a slow answer.
func evidence(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}

// hardWait bounds a call the caller stopped waiting for: its answer is
// still read (and a late decision reconciled, see decide) until then.
func (l *Limiter) hardWait() time.Duration {
	return max(20*l.opts.Timeout, time.Second)
}

// call runs one Redis call bounded by Options.Timeout (see the file's
// comment). A failure of Redis (not of the caller's context) returns an
// error wrapping errRedisDown; server replies that are bugs (ERR,
// WRONGTYPE) are returned as they are.
func (l *Limiter) call(ctx context.Context, op string, fn func(context.Context) error) error {
	return l.callLate(ctx, op, fn, nil)
}

// callLate is call; when the caller stops waiting (deadline) and late is
// set, late runs on the call's goroutine with the call's outcome once it
// returns (nil error: fn's results may be read).
func (l *Limiter) callLate(ctx context.Context, op string, fn func(context.Context) error, late func(error)) error {
	queued := time.Now()
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		default:
			t := time.NewTimer(l.opts.Timeout)
			select {
			case l.slots <- struct{}{}:
				t.Stop()
			case <-t.C:
				// Every connection is busy and none freed within the
				// timeout: the process's own queue, not Redis, is slow.
				return fmt.Errorf("%w: %s: no Redis connection free within %v", ErrOverloaded, op, l.opts.Timeout)
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.hardWait())
	type result struct {
		err     error
		elapsed time.Duration
	}
	ch := make(chan result, 1)
	var mu sync.Mutex
	gaveUp := false
	go func() {
		err := fn(cctx)
		elapsed := time.Since(start)
		cancel()
		if l.slots != nil {
			<-l.slots
		}
		mu.Lock()
		if !gaveUp {
			ch <- result{err, elapsed} // buffered
			mu.Unlock()
			return
		}
		mu.Unlock()
		{
			// Its timeout was counted when the caller gave up; only a
			// broken connection adds evidence now.
			if err != nil && evidence(err) {
				l.markDown()
			}
			if late != nil {
				late(err)
			}
		}
	}()
	// giveUp stops waiting unless the answer is already there.
	giveUp := func() (result, bool) {
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-ch:
			return r, true
		default:
			gaveUp = true
			return result{}, false
		}
	}
	deadline := start.Add(l.opts.Timeout)
	slow := false // Redis answered a probe: wait for the answer
	t := time.NewTimer(l.opts.Timeout)
	defer t.Stop()
	var r result
wait:
	for {
		select {
		case r = <-ch:
			break wait
		case <-ctx.Done():
			var ok bool
			if r, ok = giveUp(); ok {
				break wait
			}
			return fmt.Errorf("%w: %w", errGaveUpCtx, ctx.Err())
		case now := <-t.C:
			// A timer firing well past its time means this process waited
			// for a CPU: so may the answer's reader. Wait again, up to the
			// hard bound, rather than blame Redis for our own queue.
			if lag := now.Sub(deadline); lag > l.opts.Timeout/4 && now.Sub(start) < l.hardWait()-l.opts.Timeout {
				deadline = time.Now().Add(l.opts.Timeout)
				t.Reset(l.opts.Timeout)
				continue
			}
			// Past the timeout: is Redis slow, or gone? A PING on a
			// connection of its own says. An answering Redis is waited
			// for (up to the hard bound): its answer is exact and already
			// counted, which no fail mode can match.
			if !slow {
				if l.answeredSince(start) || l.alive() || l.answeredSince(start) {
					slow = true
					if rest := l.hardWait() - time.Since(start); rest > 0 {
						t.Reset(rest)
						continue
					}
				}
			}
			var ok bool
			if r, ok = giveUp(); ok {
				break wait
			}
			// Neither this call nor a PING answered while the process had
			// its CPU: a failure. Redis is down once failures keep on (see
			// health.record); until then this decision alone is lost.
			if h := l.opts.Hooks.OnRedisError; h != nil {
				h(op, context.DeadlineExceeded)
			}
			if l.health.record(time.Now(), true) {
				l.markDown()
			}
			return fmt.Errorf("%w: %s: within %v", errGaveUp, op, l.opts.Timeout)
		}
	}
	if h := l.opts.Hooks.OnRedisWait; h != nil {
		h(op, start.Sub(queued), r.elapsed)
	}
	err := r.err
	if err == nil || errors.Is(err, redis.Nil) {
		now := time.Now()
		l.health.record(now, false)
		if ns := now.UnixNano(); ns-l.lastOK.Load() > int64(time.Millisecond) {
			l.lastOK.Store(ns)
		}
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if strings.HasPrefix(msg, "ERR ") || strings.HasPrefix(msg, "WRONGTYPE") {
			if h := l.opts.Hooks.OnRedisError; h != nil {
				h(op, err)
			}
			return fmt.Errorf("limiter: %s: %w", op, err)
		}
	}
	if l.failed(op, err) {
		l.markDown()
	}
	return fmt.Errorf("%w: %s: %w", errRedisDown, op, err)
}

// failed reports a failed call (hook and window) and says whether Redis is
// now down: at once on evidence, else by the window's ratio.
func (l *Limiter) failed(op string, err error) bool {
	if h := l.opts.Hooks.OnRedisError; h != nil {
		h(op, err)
	}
	down := l.health.record(time.Now(), true)
	return down || evidence(err)
}

// abandoned says that call returned without waiting for its function
// (timeout, cancellation): what the function writes must not be read.
func abandoned(err error) bool {
	return errors.Is(err, errRedisDown) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOverloaded)
}

// answeredSince says whether Redis answered a call of this process since
// start: then it is alive, and a call still waiting is only slow (or this
// process is late reading it).
func (l *Limiter) answeredSince(start time.Time) bool {
	return l.lastOK.Load() > start.UnixNano()
}

// alive says whether Redis answers a PING within twice Options.Timeout
// (or did within the last Timeout). One probe runs at a time, on a connection of
// the limiter's own for a single-node client, so that a busy pool does not
// delay it.
func (l *Limiter) alive() bool {
	if last := l.lastPong.Load(); last != 0 && time.Now().UnixNano()-last < int64(l.opts.Timeout) {
		return true
	}
	ch := l.sf.DoChan("\x00ping", func() (any, error) {
		ctx, cancel := context.WithTimeout(l.ctx, l.hardWait())
		defer cancel()
		err := l.ping(ctx)
		if err == nil {
			l.lastPong.Store(time.Now().UnixNano())
		}
		return nil, err
	})
	before := schedLatencies()
	// Twice the timeout: a PING is one round trip, and a Redis as far
	// away as the timeout allows must not be judged gone for it.
	t := time.NewTimer(2 * l.opts.Timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.Err != nil && evidence(r.Err) {
			l.markDown() // Redis refused or reset the probe's connection
		}
		return r.Err == nil
	case <-t.C:
		// No PONG in time. A Redis that refuses connections is down (the
		// client's own dial retries would hide it for a while).
		if l.refused() {
			l.markDown()
			return false
		}
		// If this process's goroutines queued for a CPU meanwhile, or its
		// own loopback socket is not read in time (the network poller
		// starved), the PONG may be here, unread: Redis is not to blame.
		return starved(before, schedLatencies(), l.opts.Timeout/4) || l.loop.lag(l.opts.Timeout) > l.opts.Timeout/4
	}
}

// loopback is a TCP connection of the process to itself: how long a byte
// written to it takes to be read is how late this process reads any
// socket, Redis's answers included.
type loopback struct {
	mu   sync.Mutex
	a, b net.Conn
}

// lag returns how long one byte took through the loopback (within, or
// more), 0 when it cannot be set up.
func (lb *loopback) lag(within time.Duration) time.Duration {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.a == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0
		}
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := ln.Accept()
			acc <- c
		}()
		a, err := net.Dial("tcp", ln.Addr().String())
		b := <-acc
		ln.Close()
		if err != nil || b == nil {
			if a != nil {
				a.Close()
			}
			return 0
		}
		lb.a, lb.b = a, b
	}
	start := time.Now()
	var one [1]byte
	_ = lb.b.SetReadDeadline(start.Add(within))
	if _, err := lb.a.Write(one[:]); err != nil {
		lb.closeLocked()
		return 0
	}
	if _, err := lb.b.Read(one[:]); err != nil {
		lb.closeLocked() // a byte may be left in it: start afresh
		return within
	}
	return time.Since(start)
}

func (lb *loopback) close() {
	lb.mu.Lock()
	lb.closeLocked()
	lb.mu.Unlock()
}

func (lb *loopback) closeLocked() {
	if lb.a != nil {
		lb.a.Close()
		lb.b.Close()
		lb.a, lb.b = nil, nil
	}
}

// schedLatencies is the runtime's histogram of how long goroutines waited
// to run once runnable.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// starved says whether, between two readings of schedLatencies, at least
// a tenth of the goroutines that ran had waited longer than lag for a CPU.
func starved(a, b *metrics.Float64Histogram, lag time.Duration) bool {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return false
	}
	var total, over uint64
	for i := range b.Counts {
		n := b.Counts[i] - a.Counts[i]
		total += n
		if b.Buckets[i] >= lag.Seconds() {
			over += n
		}
	}
	return total > 0 && over*10 >= total
}

func (l *Limiter) ping(ctx context.Context) error {
	c, ok := l.rdb.(*redis.Client)
	if !ok {
		return l.rdb.Ping(ctx).Err()
	}
	l.probeMu.Lock()
	defer l.probeMu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if l.probeConn == nil {
		l.probeConn = c.Conn()
	}
	err := l.probeConn.Ping(ctx).Err()
	if err != nil {
		_ = l.probeConn.Close()
		l.probeConn = nil
	}
	return err
}

// refused says whether a TCP connection to a single-node client's Redis
// is refused (nothing listens there).
func (l *Limiter) refused() bool {
	c, ok := l.rdb.(*redis.Client)
	if !ok || c.Options().Network == "unix" {
		return false
	}
	conn, err := net.DialTimeout("tcp", c.Options().Addr, l.opts.Timeout)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	conn.Close()
	return false
}
