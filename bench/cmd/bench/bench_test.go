package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/redistest"
)

// writeSection replaces its own section in place and leaves the rest alone.
func TestWriteSectionReplacesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := writeSection(path, "limiter", "Limiter decisions", "first"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(raw), "# Benchmarks") || !strings.Contains(string(raw), "## Limiter decisions\n\n<!-- bench:limiter:start -->\nfirst\n<!-- bench:limiter:end -->") {
		t.Fatalf("new file:\n%s", raw)
	}
	other := string(raw) + "\n## Someone else's\n\nkept\n"
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "limiter", "Limiter decisions", "second"); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(path)
	s := string(raw)
	if strings.Contains(s, "first") || !strings.Contains(s, "second") || !strings.Contains(s, "## Someone else's\n\nkept") || strings.Count(s, "## Limiter decisions") != 1 {
		t.Fatalf("rewritten file:\n%s", s)
	}
	if err := os.WriteFile(path, []byte("<!-- bench:limiter:start -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "limiter", "Limiter decisions", "x"); err == nil {
		t.Fatal("a file with one marker was rewritten")
	}
}

// The decision benchmark runs end to end with tiny durations and writes its
// table (a smoke test: the numbers mean nothing here).
func TestDecisionBenchSmoke(t *testing.T) {
	redistest.New(t) // skips (or fails in CI) without Redis
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	err := run(context.Background(), []string{"-redis", redistest.URL(), "-runs", "1", "-duration", "60ms", "-slice", "30ms",
		"-tenants", "20", "-goroutines", "1,2", "-out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(out)
	for _, want := range []string{"| tollgate rate+quota | 2 |", "| redis_rate v10 Allow | 1 |", "ulule/limiter", "go-redis PING", "tollgate batching", "Machine:"} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("BENCHMARKS.md lacks %q:\n%s", want, raw)
		}
	}
}
