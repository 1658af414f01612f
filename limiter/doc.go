// Package limiter decides whether a tenant's request may proceed under its
// plan — a per-second token bucket, a period quota per meter, a concurrency
// limit — in one Redis round trip, and renders the decision as the IETF
// RateLimit headers and a 429 problem body.
//
// The tenant's limits come from the entitlement snapshot that Tollgate's
// server writes to Redis and announces on a pub/sub channel; each Limiter
// keeps the snapshots it reads in a bounded near-cache, so the plan lookup
// costs no round trip in steady state. A snapshot missing from Redis (a
// flush, a failover) is asked of Options.Loader; RemoteLoaders gives a
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
//   - When Redis fails or is slower than Options.Timeout (default 50ms), each
//     policy's fail mode decides: open, closed (ErrUnavailable) or local (an
//     in-process bucket at the limit divided by Options.ExpectedInstances).
//     Redis is tried again after Options.Cooldown.
//   - No logging and no global state: metrics go through Options.Hooks.
//   - The package imports only the standard library, go-redis and
//     golang.org/x/{time,sync} (a test enforces it).
package limiter
