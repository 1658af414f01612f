package limiter

import "errors"

var (
	// ErrUnavailable means Redis could not be reached within the timeout and
	// the fail mode of a policy of the request is closed. HTTP: 503.
	ErrUnavailable = errors.New("limiter: redis unavailable")
	// ErrOverloaded means the process-wide cap (Options.MaxInFlight) was
	// reached. HTTP: 503.
	ErrOverloaded = errors.New("limiter: overloaded")
	// ErrUnknownTenant means the tenant has no snapshot and the loader does
	// not know it (or no loader is configured). Loaders should return it (or
	// wrap it) for a tenant that does not exist.
	ErrUnknownTenant = errors.New("limiter: unknown tenant")
	// ErrInvalidRequest is wrapped by every error about a bad argument
	// (negative cost, cost over Options.MaxCost, a malformed tenant id).
	ErrInvalidRequest = errors.New("limiter: invalid request")
	// ErrClosed is returned by Allow (and by decisions waiting in a batch)
	// once Close was called: a Limiter cannot be reopened, make a new one.
	// Close itself is idempotent. HTTP: Middleware answers it 503, like
	// ErrUnavailable, since it happens while a server shuts down.
	ErrClosed = errors.New("limiter: closed")
)
