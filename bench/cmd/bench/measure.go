package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// contender is one thing measured: op makes one decision (or one PING).
type contender struct {
	name string
	// op makes one decision for a tenant drawn from rng.
	op func(ctx context.Context, rng *rand.Rand) error
	// calls returns the client round trips made so far (nil: not counted).
	calls func() int64
}

// cell accumulates one contender at one goroutine count in one run.
type cell struct {
	ops     int64
	errs    int64
	elapsed time.Duration
	calls   int64
	lat     []time.Duration
}

// stats is the summary of one cell.
type stats struct {
	opsPerSec float64
	p50, p99  time.Duration
}

func (c *cell) stats() stats {
	slices.Sort(c.lat)
	return stats{opsPerSec: float64(c.ops) / c.elapsed.Seconds(), p50: pct(c.lat, 0.50), p99: pct(c.lat, 0.99)}
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	return sorted[i]
}

// row is the median over runs of one contender at one goroutine count.
type row struct {
	name       string
	goroutines int
	runs       []stats
	med        stats
	rtPerOp    float64 // -1 when not counted
	errs       int64
	ops        int64
}

// firstErr keeps the first error a contender returned, to print it.
type firstErr struct {
	mu  sync.Mutex
	err map[string]error
}

func (f *firstErr) set(name string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = map[string]error{}
	}
	if f.err[name] == nil {
		f.err[name] = err
	}
}

// alternate runs every contender for c.duration at each goroutine count, in
// slices of c.slice, rotating the order slice by slice, c.runs times, and
// returns one row per contender and goroutine count.
func alternate(ctx context.Context, c config, cs []contender, log io.Writer) ([]row, error) {
	var fe firstErr
	type key struct {
		name string
		g    int
	}
	all := map[key]*row{}
	var order []key
	for _, g := range c.goroutines {
		for _, ct := range cs {
			k := key{ct.name, g}
			all[k] = &row{name: ct.name, goroutines: g, rtPerOp: -1}
			order = append(order, k)
		}
	}
	nslices := int((c.duration + c.slice - 1) / c.slice)
	totalCalls := map[key]int64{}
	for r := 0; r < c.runs; r++ {
		for _, g := range c.goroutines {
			cells := make([]cell, len(cs))
			for s := 0; s < nslices; s++ {
				for j := range cs {
					i := (j + s) % len(cs) // rotate so no contender always goes first
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					runSlice(ctx, cs[i], g, c.slice, uint64(r*1000+s), &cells[i], &fe)
				}
			}
			for i, ct := range cs {
				k := key{ct.name, g}
				st := cells[i].stats()
				rw := all[k]
				rw.runs = append(rw.runs, st)
				rw.errs += cells[i].errs
				rw.ops += cells[i].ops
				totalCalls[k] += cells[i].calls
				fmt.Fprintf(log, "run %d  g=%-3d %-28s %9.0f ops/s  p50 %-9v p99 %-9v errors %d\n",
					r+1, g, ct.name, st.opsPerSec, st.p50.Round(time.Microsecond), st.p99.Round(time.Microsecond), cells[i].errs)
			}
		}
	}
	out := make([]row, 0, len(order))
	for _, k := range order {
		rw := all[k]
		rw.med = medianStats(rw.runs)
		for _, ct := range cs {
			if ct.name == k.name && ct.calls != nil && rw.ops > 0 {
				rw.rtPerOp = float64(totalCalls[k]) / float64(rw.ops)
			}
		}
		out = append(out, *rw)
	}
	fe.mu.Lock()
	for name, err := range fe.err {
		fmt.Fprintf(log, "first error of %s: %v\n", name, err)
	}
	fe.mu.Unlock()
	return out, nil
}

func runSlice(ctx context.Context, ct contender, g int, d time.Duration, seed uint64, acc *cell, fe *firstErr) {
	var calls0 int64
	if ct.calls != nil {
		calls0 = ct.calls()
	}
	lats := make([][]time.Duration, g)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			buf := make([]time.Duration, 0, 4096)
			for {
				t0 := time.Now()
				if !t0.Before(deadline) || ctx.Err() != nil {
					break
				}
				err := ct.op(ctx, rng)
				buf = append(buf, time.Since(t0))
				if err != nil {
					errs.Add(1)
					fe.set(ct.name, err)
				}
			}
			lats[i] = buf
		}(i)
	}
	wg.Wait()
	acc.elapsed += time.Since(start)
	for _, l := range lats {
		acc.ops += int64(len(l))
		acc.lat = append(acc.lat, l...)
	}
	acc.errs += errs.Load()
	if ct.calls != nil {
		acc.calls += ct.calls() - calls0
	}
}

func medianStats(runs []stats) stats {
	ops := make([]float64, len(runs))
	p50 := make([]time.Duration, len(runs))
	p99 := make([]time.Duration, len(runs))
	for i, r := range runs {
		ops[i], p50[i], p99[i] = r.opsPerSec, r.p50, r.p99
	}
	sort.Float64s(ops)
	slices.Sort(p50)
	slices.Sort(p99)
	m := len(runs) / 2
	if len(runs)%2 == 1 {
		return stats{ops[m], p50[m], p99[m]}
	}
	return stats{(ops[m-1] + ops[m]) / 2, (p50[m-1] + p50[m]) / 2, (p99[m-1] + p99[m]) / 2}
}

// fmtDur prints a latency in µs under 10 ms, else in ms.
func fmtDur(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

func fmtOps(f float64) string {
	if f >= 10000 {
		return fmt.Sprintf("%.1fk", f/1000)
	}
	return fmt.Sprintf("%.2fk", f/1000)
}

// table renders rows as a Markdown table; base names the contender the
// ratios are taken against ("" = no ratio columns).
func table(rows []row, base string) string {
	var b strings.Builder
	if base != "" {
		fmt.Fprintf(&b, "| contender | goroutines | ops/s | p50 | p99 | round trips / decision | ops/s vs %s | p99 vs %s | ops/s of each run |\n", base, base)
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	} else {
		b.WriteString("| contender | clients | decisions/s | p50 | p99 | errors | decisions/s of each run |\n")
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	}
	baseOf := map[int]stats{}
	for _, r := range rows {
		if r.name == base {
			baseOf[r.goroutines] = r.med
		}
	}
	for _, r := range rows {
		var each []string
		for _, s := range r.runs {
			each = append(each, fmtOps(s.opsPerSec))
		}
		if base == "" {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d | %s |\n", r.name, r.goroutines, fmtOps(r.med.opsPerSec),
				fmtDur(r.med.p50), fmtDur(r.med.p99), r.errs, strings.Join(each, ", "))
			continue
		}
		rt := "n/a"
		if r.rtPerOp >= 0 {
			rt = fmt.Sprintf("%.3f", r.rtPerOp)
		}
		ratioOps, ratioP99 := "", ""
		if bs, ok := baseOf[r.goroutines]; ok && bs.opsPerSec > 0 && bs.p99 > 0 {
			ratioOps = fmt.Sprintf("%.2f×", r.med.opsPerSec/bs.opsPerSec)
			ratioP99 = fmt.Sprintf("%.2f×", float64(r.med.p99)/float64(bs.p99))
		}
		errs := ""
		if r.errs > 0 {
			errs = fmt.Sprintf(" (%d errors)", r.errs)
		}
		fmt.Fprintf(&b, "| %s%s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.name, errs, r.goroutines, fmtOps(r.med.opsPerSec),
			fmtDur(r.med.p50), fmtDur(r.med.p99), rt, ratioOps, ratioP99, strings.Join(each, ", "))
	}
	return b.String()
}
