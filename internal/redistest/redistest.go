// Package redistest gives each test a client to the real Redis and a key
// prefix of its own, cleaned with SCAN + UNLINK when the test ends (never
// FLUSHDB: other packages' tests share the server), and Redis processes of
// a test's own (servers to kill, replicas, Sentinels, Clusters). Without a
// server, a test skips locally and fails when CI is set.
//
// The shared-Redis helpers and the single servers live in the limiter
// module (limiter/limitertest/redisproc), whose tests need them without
// Tollgate's internal packages; this package names them for Tollgate's
// tests and adds what only they use (replication, Sentinel).
package redistest

import "github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"

var (
	// URL is the server the tests use: REDISTEST_URL, else the local default.
	URL = redisproc.URL
	// New returns a client and a unique key prefix for this test.
	New = redisproc.New
	// Prefix makes a fresh key prefix.
	Prefix = redisproc.Prefix
	// Clean unlinks every key under prefix, on every master of a cluster.
	Clean = redisproc.Clean
)
