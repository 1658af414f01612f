// Package limiter decides whether a tenant's request may proceed under its
// plan — a per-second token bucket, a period quota per meter, a concurrency
// limit — in one Redis round trip. Package limithttp renders a decision as
// the IETF RateLimit headers and a 429 problem body (and has a middleware),
// package remote loads from Tollgate's API what Redis lost, and package
// limitertest helps a backend test against the real limiter.
//
// The tenant's limits come from the entitlement snapshot that Tollgate's
// server writes to Redis and announces on a pub/sub channel; each Limiter
// keeps the snapshots it reads in a bounded near-cache, so the plan lookup
// costs no round trip in steady state. A snapshot missing from Redis (a
// flush, a failover) is asked of Options.Loader; package remote gives a
// backend outside Tollgate loaders that read snapshots and durable usage
// from Tollgate's API. A backend may also pass explicit Limits of its own
// (per IP, per endpoint) with sliding windows.
//
// Rules the package keeps:
//
//   - All policies of one decision are checked and taken in one Lua script
//     (EVALSHA), all or nothing: a refused request consumes nothing. Cost
//     weights tokens and quota units; an unset Cost is 1, and peeking
//     (deciding without taking) is asked for with Request.Peek.
//   - Redis TIME is the only clock. All keys of one tenant share the hash tag
//     {t:<tenant>}, so a decision touches one Cluster slot; idle keys expire.
//   - A refusal is a Decision, never an error. Errors are ErrInvalidRequest,
//     ErrUnknownTenant, ErrUnavailable, ErrOverloaded and, after Close,
//     ErrClosed.
//   - A slow answer is not an outage: a call past Options.Timeout (default
//     50ms) is waited for while Redis answers a PING (or other calls), and
//     a process late for its CPU never blames Redis. When Redis is down on
//     evidence (refused or reset connections, a silent PING, a failure
//     ratio), each policy's fail mode decides with the tenant's real limits
//     (read through Options.Loader if need be): open, closed
//     (ErrUnavailable) or local (in-process, at the limits divided by the
//     instances alive; what it admits is added to Redis once it answers).
//     A probe every Options.Cooldown brings Redis back.
//   - No logging and no global state: metrics go through Options.Hooks.
//   - The module (github.com/tollgatehq/tollgate/limiter) imports only the
//     standard library, go-redis and golang.org/x/{time,sync} (a test
//     enforces it, and scripts/consumer-check.sh bounds a backend's module
//     graph). Packages keyspace (the Redis protocol Tollgate's server
//     shares) and tgserver are for Tollgate's own server, not for backends.
package limiter
