// Package testkit is what Tollgate's tests share: polling until a condition
// holds (never sleeping a fixed time), skipping locally but failing in CI
// when a service is missing, and building each command once per test
// binary.
package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/limiter/limitertest"
	"github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"
)

// Eventually polls cond every few milliseconds until it holds, and fails
// the test naming what did not happen if it still does not after within.
// It returns how long cond took to hold. Give within generously: on two
// loaded cores under -race a second-long condition can take ten.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return limitertest.Eventually(t, within, what, cond)
}

// Unavailable fails the test when CI is set and skips it otherwise: a
// missing service (Postgres, Redis, stripe-mock, Chromium) must never let
// CI pass without running the test.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	redisproc.Unavailable(t, service, err)
}

var (
	binMu   sync.Mutex
	binDir  string
	binErrs = map[string]error{}
	bins    = map[string]string{}
)

// Binary builds the command pkg (an import path such as
// github.com/tollgatehq/tollgate/cmd/worker) once per test binary and
// returns the executable's path; later calls reuse it. Cleanup removes
// the build directory (pgtest.Main calls it).
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := bins[pkg]; ok {
		return p
	}
	if err, ok := binErrs[pkg]; ok {
		t.Fatal(err)
	}
	if binDir == "" {
		d, err := os.MkdirTemp("", "tollgate-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = d
	}
	out := filepath.Join(binDir, path.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		binErrs[pkg] = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		t.Fatal(binErrs[pkg])
	}
	bins[pkg] = out
	return out
}

// Cleanup removes what Binary built; call it after m.Run.
func Cleanup() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}
