package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// `make test` ends with scripts/test-notes.sh, which says that the browser
// tests were skipped, and how to install Chromium, when Chromium is missing
// and CI is not set (with CI set the browser tests fail instead).
func TestMakeTestSaysBrowserTestsSkippedWithoutChromium(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("make", "-n", "--no-print-directory", "-C", "../..", "test").CombinedOutput()
	if err != nil {
		if _, lerr := exec.LookPath("make"); lerr != nil {
			t.Skip("no make")
		}
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "go test") || !strings.Contains(last, "scripts/test-notes.sh") {
		t.Fatalf("make test's last step %q does not run scripts/test-notes.sh after the suite", last)
	}
	notes := func(env ...string) string {
		cmd := exec.Command("bash", "../../scripts/test-notes.sh")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "CHROMIUM=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("test-notes.sh %v: %v\n%s", env, err, b)
		}
		return string(b)
	}
	if o := notes("CHROMIUM=/nonexistent/chromium"); !strings.Contains(o, "browser tests") || !strings.Contains(o, "SKIPPED") || !strings.Contains(o, "apt-get install chromium") {
		t.Fatalf("without Chromium: %q", o)
	}
	if o := notes("CHROMIUM=/nonexistent/chromium", "CI=true"); o != "" {
		t.Fatalf("with CI set (the browser tests fail there): %q", o)
	}
	if o := notes("CHROMIUM=/bin/sh"); o != "" {
		t.Fatalf("with Chromium: %q", o)
	}
}
