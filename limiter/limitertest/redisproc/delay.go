package redisproc

import (
	"net"
	"sync"
	"testing"
	"time"
)

// DelayProxy is a TCP proxy in front of a server that delays every byte by
// a fixed time in each direction, without slowing the stream down: data
// read at t is written at t + delay, in order, so that a server "20 ms
// away" answers in 40 ms whatever the load, as over a long link.
type DelayProxy struct {
	Addr   string
	target string
	delay  time.Duration
	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// StartDelayProxy listens on a free loopback port and proxies to target
// with delay each way until the test ends.
func StartDelayProxy(t testing.TB, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redisproc: delay proxy: %v", err)
	}
	p := &DelayProxy{Addr: ln.Addr().String(), target: target, delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// pipe copies src to dst, each chunk written delay after it was read. A
// reader and a writer goroutine with a queue between them keep the delay
// from adding up across chunks.
func (p *DelayProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	type chunk struct {
		at time.Time
		b  []byte
	}
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d) // the link's latency, not synchronisation
			}
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		dst.Close()
		for range q { // drain so that the reader never blocks
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b := make([]byte, n)
			copy(b, buf[:n])
			q <- chunk{at: time.Now().Add(p.delay), b: b}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// Close stops listening and closes every proxied connection.
func (p *DelayProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.wg.Wait()
}
