package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
)

// AuthLimitPolicy is the policy name of the failed-authentication window in
// headers and 429 bodies.
const AuthLimitPolicy = "auth-failures"

// AuthLimitOptions configure an AuthLimiter; the zero value is usable.
type AuthLimitOptions struct {
	// Limit is the number of failed authentications one client IP may make
	// per Window; default 20.
	Limit int64
	// Window is the length of the sliding window; default 1 minute.
	Window time.Duration
	// MaxSuspects bounds the in-process set of IPs that failed recently;
	// default 100,000.
	MaxSuspects int
}

// AuthLimiter limits failed authentication (bad API keys, bad admin tokens,
// failed dashboard logins) per client IP with a sliding window kept in Redis
// and shared by every instance. The window is looked at before the
// credentials are checked, so that once an IP has used up its failures its
// requests are refused without reaching the key store or the database.
//
// Only IPs that failed recently on this instance pay a look at the window
// (one Redis round trip, none once refused: the limiter caches refusals
// until their retry time), so an authenticated request costs nothing extra.
// A flood from a new IP gets at most one credential check per instance
// before the window is consulted.
type AuthLimiter struct {
	l      *limiter.Limiter
	limits limiter.Limits
	window time.Duration
	max    int

	mu       sync.Mutex
	suspects map[string]time.Time // IP -> end of its last failure's window

	checks atomic.Int64
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
		suspects: map[string]time.Time{},
	}
}

// AuthLimitedError is returned by Guard when the IP has no failures left;
// Write answers it (429 with Retry-After and a problem body).
type AuthLimitedError struct {
	Decision *limiter.Decision
}

func (e *AuthLimitedError) Error() string {
	return "httpapi: too many failed authentications from this address"
}

// Write answers 429 with the window's headers and a problem body.
func (e *AuthLimitedError) Write(w http.ResponseWriter) { limiter.WriteRefusal(w, e.Decision) }

// ClientIP is the address the limit is keyed by: the TCP peer. Forwarding
// headers are ignored on purpose: anyone can send them, and a limit keyed by
// them could be dodged by changing them on every request.
func ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Guard runs check (the credential check) unless ip has used up its
// failures, and records a failure when check returns an Unauthorized
// apperr. It returns *AuthLimitedError when refused, limiter.ErrUnavailable
// when Redis is down and the window's fail mode is closed, else check's
// error.
func (a *AuthLimiter) Guard(ctx context.Context, ip string, check func(context.Context) error) error {
	if err := a.Before(ctx, ip); err != nil {
		return err
	}
	err := check(ctx)
	if IsAuthFailure(err) {
		a.Failed(ctx, ip)
	}
	return err
}

// Before is the look at the window that Guard makes before the check; a
// caller that cannot wrap its check in a function calls Before, checks, and
// calls Failed on a failure.
func (a *AuthLimiter) Before(ctx context.Context, ip string) error {
	if a.suspect(ip) {
		d, err := a.l.Allow(ctx, authKey(ip), limiter.Request{Cost: 0, Limits: &a.limits})
		switch {
		case errors.Is(err, limiter.ErrUnavailable) || errors.Is(err, limiter.ErrOverloaded):
			return err
		case err != nil:
			// A bug or a bad address: never lock people out over it; the
			// credential check still protects.
		case !d.Allowed:
			return &AuthLimitedError{Decision: d}
		}
	}
	a.checks.Add(1)
	return nil
}

// Failed records one failed authentication of ip.
func (a *AuthLimiter) Failed(ctx context.Context, ip string) {
	a.mark(ip)
	// The decision's error (Redis down) is dropped: the fail mode already
	// counted it locally when it is "local".
	_, _ = a.l.Allow(context.WithoutCancel(ctx), authKey(ip), limiter.Request{Cost: 1, Limits: &a.limits})
}

// Checks counts the credential checks let through (for tests: a refused
// request must not reach the check).
func (a *AuthLimiter) Checks() int64 { return a.checks.Load() }

func authKey(ip string) string {
	// IPv6 zones ("fe80::1%eth0") and other oddities must not break the key.
	return "auth:" + strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7f || r == '{' || r == '}' {
			return '_'
		}
		return r
	}, ip)
}

func (a *AuthLimiter) suspect(ip string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.suspects[ip]
	if !ok {
		return false
	}
	if time.Now().After(until) {
		delete(a.suspects, ip)
		return false
	}
	return true
}

func (a *AuthLimiter) mark(ip string) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.suspects) >= a.max {
		// Drop the expired; if a flood of addresses keeps it full, start
		// over rather than grow: forgetting only costs a check per IP.
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
	a.suspects[ip] = now.Add(2 * a.window)
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

// authLimit is the echo middleware put in front of a credential check
// (requireTenant, requireAdmin): it refuses an IP out of failures before
// the check runs and counts the check's 401s.
func (s *Server) authLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		a := s.AuthLimiter
		if a == nil {
			return next(c)
		}
		ctx := c.Request().Context()
		ip := ClientIP(c.Request())
		if err := a.Before(ctx, ip); err != nil {
			return s.writeAuthLimit(c, err)
		}
		err := next(c)
		if IsAuthFailure(err) {
			a.Failed(ctx, ip)
		}
		return err
	}
}

func (s *Server) writeAuthLimit(c echo.Context, err error) error {
	var le *AuthLimitedError
	if errors.As(err, &le) {
		le.Write(c.Response())
		return nil
	}
	limiter.WriteUnavailable(c.Response(), err)
	return nil
}
