package redistest

import "github.com/tollgatehq/tollgate/limiter/limitertest/redisproc"

// The private Redis processes live in the limiter module
// (limiter/limitertest/redisproc), whose own tests need them without
// importing Tollgate's internal packages; these names keep Tollgate's tests
// reading as before, with one copy of the code.
type (
	Server     = redisproc.Server
	Cluster    = redisproc.Cluster
	DelayProxy = redisproc.DelayProxy
	Callgrind  = redisproc.Callgrind
)

var (
	StartServer      = redisproc.StartServer
	StartCluster     = redisproc.StartCluster
	StartDelayProxy  = redisproc.StartDelayProxy
	CallgrindFromEnv = redisproc.CallgrindFromEnv
	FreePort         = redisproc.FreePort
	ErrNoRedisServer = redisproc.ErrNoRedisServer
)
