package limithttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tollgatehq/tollgate/limiter"
)

// Decider is what Middleware needs of a limiter: *limiter.Limiter is one,
// and a test or a wrapper (a decision log, a per-route limiter) may be
// another.
type Decider interface {
	Allow(ctx context.Context, tenant string, req limiter.Request) (*limiter.Decision, error)
}

// Option configures Middleware.
type Option func(*middlewareConfig)

type middlewareConfig struct {
	onError      func(w http.ResponseWriter, r *http.Request, err error)
	shadowHeader string
}

// WithErrorHandler answers errors other than ErrUnavailable, ErrClosed and
// ErrOverloaded (the resolver's errors, ErrUnknownTenant,
// ErrInvalidRequest). The default answers 400 for ErrInvalidRequest, 401
// with WWW-Authenticate: Bearer for ErrUnknownTenant and 500 otherwise, as
// problem+json.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *middlewareConfig) { c.onError = f }
}

// WithShadowHeader names a debug header set to the would-be refusing policy
// when shadow mode let a request through.
func WithShadowHeader(name string) Option {
	return func(c *middlewareConfig) { c.shadowHeader = name }
}

// DecisionFromContext returns the decision Middleware made for a request.
func DecisionFromContext(ctx context.Context) (*limiter.Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*limiter.Decision)
	return d, ok
}

type decisionKey struct{}

// Middleware limits every request: resolve names the tenant and the
// request's cost, meter and limits; the headers of the decision are set on
// every response; a refusal answers 429 problem+json, ErrUnavailable and
// ErrOverloaded answer 503 with Retry-After. A concurrency slot is given
// back when the handler returns.
func Middleware(l Decider, resolve func(*http.Request) (tenant string, req limiter.Request, err error), opts ...Option) func(http.Handler) http.Handler {
	cfg := middlewareConfig{onError: defaultOnError}
	for _, o := range opts {
		o(&cfg)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant, req, err := resolve(r)
			if err != nil {
				cfg.onError(w, r, err)
				return
			}
			d, err := l.Allow(r.Context(), tenant, req)
			switch {
			case errors.Is(err, limiter.ErrUnavailable) || errors.Is(err, limiter.ErrOverloaded) || errors.Is(err, limiter.ErrClosed):
				WriteUnavailable(w, err)
				return
			case err != nil:
				cfg.onError(w, r, err)
				return
			}
			if !d.Allowed {
				WriteRefusal(w, d)
				return
			}
			// The slot goes back even if the handler panics; a context that is
			// already cancelled must not keep the slot until its lease expires.
			defer d.Release(context.WithoutCancel(r.Context()))
			WriteHeaders(w.Header(), d)
			if d.Shadow && cfg.shadowHeader != "" {
				w.Header().Set(cfg.shadowHeader, d.Policy)
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), decisionKey{}, d)))
		})
	}
}

func defaultOnError(w http.ResponseWriter, _ *http.Request, err error) {
	status, title, slug := http.StatusInternalServerError, "Internal server error", "internal"
	detail := "The rate limiter failed."
	switch {
	case errors.Is(err, limiter.ErrInvalidRequest):
		status, title, slug, detail = http.StatusBadRequest, "Invalid request", "invalid-request", err.Error()
	case errors.Is(err, limiter.ErrUnknownTenant):
		status, title, slug, detail = http.StatusUnauthorized, "Unknown tenant", "unauthorized", "No such tenant."
	}
	body, _ := json.Marshal(map[string]any{"type": ProblemBase + slug, "title": title, "status": status, "detail": detail})
	if status == http.StatusUnauthorized {
		// RFC 9110 §15.5.2: a 401 names the scheme that would be accepted;
		// the tenant comes from a bearer credential in most backends (a
		// WithErrorHandler answers otherwise).
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
