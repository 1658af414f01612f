// Command grpcload is a closed-loop load generator for Envoy's rate limit
// service protocol: -c workers call ShouldRateLimit back to back, each over its
// own HTTP/2 connection (as Envoy keeps one per worker thread), unrecorded for
// -warmup, then recorded for -d. Descriptor i carries one entry, -entry with
// key i: line i of -keysfile (prefixed with -prefix), else "t<i>"; i goes
// round-robin over the keys. The same client measures Tollgate and
// envoyproxy/ratelimit, so their figures differ only by the server.
// The last line printed is machine-readable:
//
//	grpcload: rps=N p50=Nus p99=Nus ok=N over=N err=N
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "", "host:port of the rate limit service (required)")
	domain := flag.String("domain", "tollgate", "rate limit domain")
	entry := flag.String("entry", "api_key", "descriptor entry key")
	prefix := flag.String("prefix", "", "prefix of each entry value (e.g. \"Bearer \")")
	keysfile := flag.String("keysfile", "", "one entry value per line (default: t0, t1, …)")
	nkeys := flag.Int("keys", 2000, "distinct keys when there is no -keysfile")
	conc := flag.Int("c", 32, "concurrent clients, each on its own connection")
	dur := flag.Duration("d", 5*time.Second, "measured duration")
	warmup := flag.Duration("warmup", time.Second, "unrecorded warm-up before -d")
	flag.Parse()
	if *addr == "" || *conc < 1 || *dur <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	keys, err := loadKeys(*keysfile, *nkeys)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(2)
	}
	reqs := make([]*rlsv3.RateLimitRequest, len(keys))
	for i, k := range keys {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: *entry, Value: *prefix + k}}}}}
	}

	var next atomic.Uint64
	var firstErr atomic.Value
	var recording atomic.Bool
	type result struct {
		lat           []time.Duration
		ok, over, bad int
	}
	results := make([]result, *conc)
	ctx, cancel := context.WithTimeout(context.Background(), *warmup+*dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := range *conc {
		conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "grpcload:", err)
			os.Exit(2)
		}
		defer conn.Close()
		client := rlsv3.NewRateLimitServiceClient(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			for ctx.Err() == nil {
				req := reqs[next.Add(1)%uint64(len(reqs))]
				start := time.Now()
				resp, err := client.ShouldRateLimit(ctx, req)
				took := time.Since(start)
				if !recording.Load() {
					continue
				}
				switch {
				case err != nil:
					// A call cut by the end of the run is not an error of the server.
					if c := status.Code(err); ctx.Err() == nil && c != codes.DeadlineExceeded && c != codes.Canceled {
						r.bad++
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					r.ok++
				default:
					r.over++
				}
				r.lat = append(r.lat, took)
			}
		}()
	}
	time.Sleep(*warmup)
	recording.Store(true)
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)

	var all []time.Duration
	var ok, over, bad int
	for _, r := range results {
		all = append(all, r.lat...)
		ok, over, bad = ok+r.ok, over+r.over, bad+r.bad
	}
	slices.Sort(all)
	pct := func(p float64) int64 {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()
	}
	if e := firstErr.Load(); e != nil {
		fmt.Fprintln(os.Stderr, "grpcload: first error:", e)
	}
	fmt.Printf("grpcload: rps=%.0f p50=%dus p99=%dus ok=%d over=%d err=%d\n",
		float64(ok+over)/elapsed.Seconds(), pct(0.50), pct(0.99), ok, over, bad)
}

func loadKeys(path string, n int) ([]string, error) {
	if path == "" {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("t%d", i)
		}
		return keys, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", path)
	}
	return keys, sc.Err()
}
