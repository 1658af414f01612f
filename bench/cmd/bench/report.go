package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"

	"github.com/redis/go-redis/v9"
)

// machine describes where the numbers were taken: CPUs, CPU model, Redis
// version, Go version.
func machine(ctx context.Context, rdb redis.UniversalClient) string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	redisVersion := "unknown"
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				redisVersion = v
			}
		}
	}
	load := "unknown"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	// The load average says how much else was running: these machines are
	// shared, and the figures move with it.
	return fmt.Sprintf("%d CPUs (nproc), %s, %s/%s, %s, Redis %s on loopback (same machine); load average at start %s",
		runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version(), redisVersion, load)
}

const benchIntro = `# Benchmarks

Side-by-side measurements of Tollgate against what a backend would otherwise use, taken on one
machine in one run so that the figures compare. Each section says the command that produced it;
sections between ` + "`<!-- bench:… -->`" + ` markers are rewritten by that command.
`

// writeSection replaces the text between <!-- bench:<id>:start --> and
// <!-- bench:<id>:end --> in path with body, appending a "## title" section
// with the markers when they are missing, and creating the file when it is.
func writeSection(path, id, title, body string) error {
	start, end := "<!-- bench:"+id+":start -->", "<!-- bench:"+id+":end -->"
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		raw, err = []byte(benchIntro), nil
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	s := string(raw)
	block := start + "\n" + strings.TrimSpace(body) + "\n" + end
	i, j := strings.Index(s, start), strings.Index(s, end)
	switch {
	case i >= 0 && j > i:
		s = s[:i] + block + s[j+len(end):]
	case i >= 0 || j >= 0:
		return fmt.Errorf("bench: %s has only one of the markers %s / %s; fix it by hand", path, start, end)
	default:
		s = strings.TrimRight(s, "\n") + "\n\n## " + title + "\n\n" + block + "\n"
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
