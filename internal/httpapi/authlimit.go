package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
)

// AuthLimitPolicy is the policy name of the failed-authentication window in
// headers and 429 bodies.
const AuthLimitPolicy = "auth-failures"

// Buckets separate the failures counted per address: wrong admin tokens
// and wrong API keys (or dashboard links) use up different allowances, so
// that a tenant's stale key never locks the admin out, nor the reverse.
// The buckets.
const (
	AuthAdmin  = "admin"
	AuthTenant = "key"
)

// AuthLimitOptions configure an AuthLimiter; the zero value is usable.
type AuthLimitOptions struct {
	// Limit is the number of failed authentications one client address may
	// make per Window and bucket; default 20.
	Limit int64
	// Window is the length of the sliding window; default 1 minute.
	Window time.Duration
	// MaxSuspects bounds the in-process set of addresses that failed
	// recently; default 100,000.
	MaxSuspects int
	// TrustedProxies are the peers whose Forwarded / X-Forwarded-For
	// headers name the client (TRUSTED_PROXIES); none by default.
	TrustedProxies []netip.Prefix
}

// AuthLimiter limits failed authentication (bad API keys, bad admin tokens,
// failed dashboard logins) per client address, with a sliding window kept
// in Redis and shared by every instance.
//
// It never blocks a valid credential: the credential is always checked,
// and only a failed check counts against the address (and is answered 429
// instead of 401 once the address has no failures left). What an exhausted
// address loses is the database lookup of keys nobody issued: its unknown
// keys are refused from the in-process key index and negative cache
// (credentials.AuthenticateKey with suspect), so a flood of made-up keys
// does not reach Postgres.
//
// Only addresses that failed recently on this instance pay a look at the
// window (one Redis round trip, none once refused: the limiter caches
// refusals until their retry time), so an authenticated request costs
// nothing extra.
type AuthLimiter struct {
	l      *limiter.Limiter
	limits limiter.Limits
	window time.Duration
	max    int
	addrs  ClientAddrs

	mu       sync.Mutex
	suspects map[string]time.Time // bucket+address -> end of its last failure's window

	failures atomic.Int64
}

// NewAuthLimiter returns an AuthLimiter deciding with l (which may be
// shared with the tenants' rate limits: the window's keys are its own).
func NewAuthLimiter(l *limiter.Limiter, opts AuthLimitOptions) *AuthLimiter {
	if opts.Limit <= 0 {
		opts.Limit = 20
	}
	if opts.Window <= 0 {
		opts.Window = time.Minute
	}
	if opts.MaxSuspects <= 0 {
		opts.MaxSuspects = 100_000
	}
	return &AuthLimiter{
		l:        l,
		limits:   limiter.Limits{Windows: []limiter.Window{{Name: AuthLimitPolicy, Limit: opts.Limit, Length: opts.Window}}},
		window:   opts.Window,
		max:      opts.MaxSuspects,
		addrs:    ClientAddrs{Trusted: opts.TrustedProxies},
		suspects: map[string]time.Time{},
	}
}

// AuthLimitedError is returned when an address has no failures left; Write
// answers it (429 with Retry-After and a problem body).
type AuthLimitedError struct {
	Decision *limiter.Decision
}

func (e *AuthLimitedError) Error() string {
	return "httpapi: too many failed authentications from this address"
}

// Write answers 429 with the window's headers and a problem body.
func (e *AuthLimitedError) Write(w http.ResponseWriter) { limithttp.WriteRefusal(w, e.Decision) }

// ClientIP is the TCP peer's address, forwarding headers ignored (the
// AuthLimiter's Address reads them from trusted proxies).
func ClientIP(r *http.Request) string {
	return AddrKey(parseHost(r.RemoteAddr), r.RemoteAddr)
}

// Address is the key failures of r are counted by: the client address
// (through TRUSTED_PROXIES), an IPv6 client grouped by its /64.
func (a *AuthLimiter) Address(r *http.Request) string { return a.addrs.Key(r) }

// Guard runs check (the credential check) and, when it fails with an
// Unauthorized apperr, counts the failure: the answer is then
// *AuthLimitedError once the address is out of failures, else check's
// error. A valid credential is never refused here.
func (a *AuthLimiter) Guard(ctx context.Context, b string, addr string, check func(context.Context) error) error {
	err := check(ctx)
	if IsAuthFailure(err) {
		if lerr := a.Failed(ctx, b, addr); lerr != nil {
			return lerr
		}
	}
	return err
}

// Blocked reports (*AuthLimitedError) whether addr has used up its failures
// in bucket b. It costs nothing for an address that has not failed on this
// instance lately. Callers use it only to skip expensive checks of
// credentials that are certainly wrong, never to refuse a valid one.
func (a *AuthLimiter) Blocked(ctx context.Context, b string, addr string) error {
	if !a.suspect(b, addr) {
		return nil
	}
	d, err := a.l.Allow(ctx, authKey(b, addr), limiter.Request{Peek: true, Limits: &a.limits})
	if err != nil || d.Allowed {
		// Redis trouble: do not guess; the credential check still protects.
		return nil
	}
	return &AuthLimitedError{Decision: d}
}

// Failed records one failed authentication of addr in bucket b and returns
// *AuthLimitedError when the address has no failures left (this one
// included); nil while it still has some.
func (a *AuthLimiter) Failed(ctx context.Context, b string, addr string) error {
	a.failures.Add(1)
	a.mark(b, addr)
	d, err := a.l.Allow(context.WithoutCancel(ctx), authKey(b, addr), limiter.Request{Cost: 1, Limits: &a.limits})
	if err != nil || d.Allowed {
		// Redis down: the fail mode (local) already counted it in process
		// when it could; a 401 is the right answer either way.
		return nil
	}
	return &AuthLimitedError{Decision: d}
}

// Failures counts the failed authentications recorded (tests).
func (a *AuthLimiter) Failures() int64 { return a.failures.Load() }

func authKey(b string, addr string) string {
	// IPv6 zones ("fe80::1%eth0") and other oddities must not break the key.
	return "auth:" + b + ":" + strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7f || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, addr)
}

func (a *AuthLimiter) suspect(b string, addr string) bool {
	k := b + " " + addr
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.suspects[k]
	if !ok {
		return false
	}
	if time.Now().After(until) {
		delete(a.suspects, k)
		return false
	}
	return true
}

func (a *AuthLimiter) mark(b string, addr string) {
	k := b + " " + addr
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.suspects) >= a.max {
		// Drop the expired; if a flood of addresses keeps it full, start
		// over rather than grow: forgetting only costs a lookup per address.
		for k, until := range a.suspects {
			if now.After(until) {
				delete(a.suspects, k)
			}
		}
		if len(a.suspects) >= a.max {
			clear(a.suspects)
		}
	}
	// Two windows: the sliding estimate still counts failures of the
	// previous window.
	a.suspects[k] = now.Add(2 * a.window)
}

// IsAuthFailure reports whether err is a failed authentication: an
// Unauthorized apperr or an echo 401.
func IsAuthFailure(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := apperr.As(err); ok {
		return e.Code == apperr.Unauthorized
	}
	var he *echo.HTTPError
	return errors.As(err, &he) && he.Code == http.StatusUnauthorized
}

// authFailures is the echo middleware put in front of a credential check
// (requireTenant, requireAdmin): the check always runs; a failure is counted
// against the client address and answered 429 once the address is out of
// failures.
func (s *Server) authFailures(b string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			a := s.AuthLimiter
			if a == nil {
				return next(c)
			}
			ctx := c.Request().Context()
			addr := a.Address(c.Request())
			if b == AuthTenant && a.Blocked(ctx, b, addr) != nil {
				c.Set(ctxSuspect, true)
			}
			err := next(c)
			if IsAuthFailure(err) {
				if lerr := a.Failed(ctx, b, addr); lerr != nil {
					return s.writeAuthLimit(c, lerr)
				}
			}
			return err
		}
	}
}

// ctxSuspect marks a request whose address is out of failed logins:
// requireTenant then refuses keys the key index does not know without
// asking Postgres.
const ctxSuspect = "tollgate.auth_suspect"

func (s *Server) writeAuthLimit(c echo.Context, err error) error {
	var le *AuthLimitedError
	if errors.As(err, &le) {
		le.Write(c.Response())
		return nil
	}
	limithttp.WriteUnavailable(c.Response(), err)
	return nil
}
