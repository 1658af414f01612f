// Command bench measures Tollgate's limiter side by side with the Redis rate
// limiters a Go backend would otherwise pick, on the same Redis in one run,
// and writes the results into BENCHMARKS.md.
//
// Default mode: every contender (go-redis PING as the round-trip floor, our
// full decision, our batching mode, go-redis/redis_rate v10 and
// ulule/limiter v3) runs in short slices, alternated, at each goroutine
// count, so that any drift of the machine hits all of them alike; the table
// gives the median of the runs. With -http it benchmarks POST /v1/check of
// the api started in-process instead.
//
//	go run ./cmd/bench                 # limiter decisions, 3 runs
//	go run ./cmd/bench -http           # POST /v1/check over HTTP
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	runs       int
	slice      time.Duration
	duration   time.Duration
	tenants    int
	goroutines []int
	redisURL   string
	dbURL      string
	out        string // BENCHMARKS.md path; "" = do not write
	http       bool
	batching   time.Duration
	only       string
	cpuprofile string
	timeout    time.Duration
	command    string // the command line, recorded with the results
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.runs, "runs", 3, "runs; the table shows the median of each figure over the runs")
	fs.DurationVar(&c.slice, "slice", time.Second, "length of one slice; contenders alternate slice by slice")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "measured time per contender, per goroutine count, per run")
	fs.IntVar(&c.tenants, "tenants", 10000, "tenants the load is spread over")
	gs := fs.String("goroutines", "1,32", "comma-separated goroutine counts (HTTP mode: concurrent clients, default 32)")
	fs.StringVar(&c.redisURL, "redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (keys go under a bench-only prefix, deleted at the end)")
	fs.StringVar(&c.dbURL, "db", envOr("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tollgate_bench?sslmode=disable"), "HTTP mode: the bench database (created if missing, tenants deleted at the end)")
	fs.StringVar(&c.out, "out", "BENCHMARKS.md", "file whose limiter section is replaced with the results; empty: print only")
	fs.BoolVar(&c.http, "http", false, "benchmark POST /v1/check of the api over HTTP instead of the limiter")
	fs.DurationVar(&c.batching, "batching", 200*time.Microsecond, "batching window of the batching contender")
	fs.StringVar(&c.only, "only", "", "comma-separated contender names to run (default all)")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "limiter.Options.Timeout of our contenders; longer than the 50 ms default so that a stall of a busy machine does not turn into fallback decisions, which skip Redis and would flatter us (they are counted as errors)")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.http && !flagSet(fs, "goroutines") {
		*gs = "32"
	}
	for _, f := range strings.Split(*gs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-goroutines %q: want comma-separated whole numbers ≥ 1", *gs)
		}
		c.goroutines = append(c.goroutines, n)
	}
	switch {
	case c.runs < 1:
		return c, fmt.Errorf("-runs %d: want at least 1", c.runs)
	case c.slice <= 0 || c.duration < c.slice:
		return c, fmt.Errorf("-slice %v -duration %v: want 0 < slice ≤ duration", c.slice, c.duration)
	case c.tenants < 1:
		return c, fmt.Errorf("-tenants %d: want at least 1", c.tenants)
	}
	c.command = "go run ./cmd/bench " + strings.Join(args, " ")
	c.command = strings.TrimSpace(c.command)
	return c, nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if c.http {
		return benchHTTP(ctx, c, stdout)
	}
	return benchDecisions(ctx, c, stdout)
}
