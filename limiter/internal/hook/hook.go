// Package hook carries what package limiter lends to package tgserver
// without exporting it to backends: limiter sets the functions in its init,
// tgserver calls them with the limiter's own types (hence any: this package
// cannot import limiter, which imports it).
package hook

import (
	"context"
	"time"
)

var (
	// Lease returns the Redis concurrency slot of a *limiter.Decision.
	Lease func(d any) (id string, expires time.Time, ok bool)
	// ReleaseLease gives back tenant's slot id through a *limiter.Limiter.
	ReleaseLease func(ctx context.Context, l any, tenant, id string) (found bool, err error)
)
