// Package redisproc runs Redis processes of a test's own: a private
// redis-server on a free loopback port (to kill, restart or stop), a
// three-master Redis Cluster, and a TCP proxy that delays replies. The
// limiter's own tests use it for outages and Cluster runs, and so do
// Tollgate's (internal/redistest wraps it); a backend testing its own fail
// modes may too. It needs redis-server (and redis-cli for a Cluster) on
// PATH: without them a test skips, or fails when CI is set.
package redisproc

import (
	"os"
	"testing"
)

// Unavailable fails the test when CI is set and skips it otherwise: a
// missing service must never let CI pass without running the test.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s unavailable (CI set, so this fails instead of skipping): %v", service, err)
	}
	t.Skipf("%s unavailable: %v", service, err)
}
