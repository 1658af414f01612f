package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
	"github.com/tollgatehq/tollgate/limiter/limithttp"
	"github.com/tollgatehq/tollgate/limiter/tgserver"
)

// pathCheck is the one /v1 route that makes its own decision (its own cost,
// and quota), so the group's rate limit skips it.
const pathCheck = "/v1/check"

// rateLimit passes every /v1 request through its tenant's per-second rate
// limit (cost 1, no quota: a tenant over its quota can still read why) and
// sets the rate-limit headers on the response. It runs after requireTenant.
func (s *Server) rateLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Limiter == nil || c.Path() == pathCheck {
			return next(c)
		}
		d, err := s.decide(c, limiter.Request{Cost: 1, SkipQuota: true})
		if err != nil || d == nil {
			return err
		}
		return next(c)
	}
}

// decide makes a decision for the authenticated tenant and answers what
// must be answered at once: on a refusal it writes the 429 and returns a nil
// decision; otherwise it sets the headers and returns the decision. A
// returned error goes to the error handler.
func (s *Server) decide(c echo.Context, req limiter.Request) (*limiter.Decision, error) {
	tenant := tenantIDFrom(c)
	if tenant == "" {
		return nil, apperr.New(apperr.Unauthorized, "missing bearer token: send Authorization: Bearer <API key>")
	}
	d, err := s.allow(c.Request().Context(), tenant, req)
	if err != nil {
		return nil, s.limiterError(c, err)
	}
	if !d.Allowed {
		if p := impossible(d, req); p != nil && !s.grantsCanCover(c.Request().Context(), tenant, p) {
			// Waiting would never help: a client honouring Retry-After
			// would loop forever. 422 says so, with the headers every /v1
			// answer carries.
			setDecision(c, "impossible", p.Name)
			limithttp.WriteHeaders(c.Response().Header(), d)
			c.Response().Header().Del("Retry-After") // no wait helps
			return nil, writeProblem(c, costProblem(d, p, req), http.StatusUnprocessableEntity)
		}
		setDecision(c, "refused", d.Policy)
		limithttp.WriteRefusal(c.Response(), d)
		return nil, nil
	}
	setDecision(c, "allowed", "")
	limithttp.WriteHeaders(c.Response().Header(), d)
	return d, nil
}

// limiterError answers the errors of a decision. Redis trouble and the
// process cap are 503s with Retry-After (written here, as the limiter
// words them); nothing about the limiter is ever a 500 for the client.
func (s *Server) limiterError(c echo.Context, err error) error {
	ctx := c.Request().Context()
	switch {
	case errors.Is(err, limiter.ErrOverloaded):
		// The process-wide cap: shed with 503 (never 429: the tenant did
		// nothing wrong) and count it.
		s.m.overloaded.Inc()
		setDecision(c, "overloaded", "")
		limithttp.WriteUnavailable(c.Response(), err)
		return nil
	case errors.Is(err, limiter.ErrUnavailable):
		setDecision(c, "unavailable", "")
		limithttp.WriteUnavailable(c.Response(), err)
		return nil
	case errors.Is(err, limiter.ErrUnknownTenant):
		// The key authenticated but its tenant is gone (deleted meanwhile).
		return apperr.New(apperr.Unauthorized, "the API key's tenant no longer exists")
	case errors.Is(err, limiter.ErrInvalidRequest):
		return apperr.New(apperr.Invalid, "%v", err)
	case ctx.Err() != nil:
		// The client went away; nobody reads the answer.
		return apperr.New(apperr.Unavailable, "request cancelled")
	default:
		// The snapshot loader failed (Postgres) or Redis answered nonsense.
		s.log.ErrorContext(ctx, "rate limit decision failed", "route", c.Path(), "err", err)
		return apperr.New(apperr.Unavailable, "the rate limiter cannot decide right now; retry")
	}
}

// impossible returns the policy of a refusal that no wait can lift: a cost
// above the rate's burst, a window's limit or a hard quota's whole limit. Decisions of
// a fail mode (whose local limits are a share of the real ones) never count.
func impossible(d *limiter.Decision, req limiter.Request) *limiter.PolicyStatus {
	if d.Fallback != "" || d.Shadow {
		return nil
	}
	cost := req.Cost
	if cost < 1 {
		cost = 1
	}
	for i := range d.Policies {
		p := &d.Policies[i]
		switch {
		case p.Name == keyspace.PolicyRate && p.Limit < cost:
			return p
		case p.Mode == limiter.ModeHard && p.Unit == "" && p.Limit < cost:
			return p
		case tgserver.IsWindow(p) && p.Limit < cost: // no window ever holds more than its limit
			return p
		}
	}
	return nil
}

// grantsCanCover says whether credit grants could still admit a cost over
// quota p's included units: a grant of the meter in effect or pending, or
// a top-up of it to buy. The refusal is then an ordinary 429 (its
// Retry-After the limiter's: the period end or a grant taking effect), not
// "never". A failure to ask is logged and taken as yes: a wrong 429 costs
// the client a retry, a wrong 422 a request that could have run.
func (s *Server) grantsCanCover(ctx context.Context, tenant string, p *limiter.PolicyStatus) bool {
	if s.Credits == nil || p.Name == keyspace.PolicyRate || tgserver.IsWindow(p) || p.Name == keyspace.PolicyConcurrency {
		return false
	}
	ok, err := s.Credits.CanGrow(ctx, tenant, p.Name)
	if err != nil {
		s.log.WarnContext(ctx, "asking for credit grants failed; answering 429", "tenant_id", tenant, "meter", p.Name, "err", err)
		return true
	}
	return ok
}

func costProblem(d *limiter.Decision, p *limiter.PolicyStatus, req limiter.Request) map[string]any {
	what := "its burst"
	switch {
	case tgserver.IsWindow(p):
		what = "its window of " + p.Window.String()
	case p.Name != keyspace.PolicyRate:
		what = "its hard quota for the period"
	}
	detail := fmt.Sprintf("a cost of %d can never be admitted: the plan %q allows at most %d (%s of policy %q)", req.Cost, d.Plan, p.Limit, what, p.Name)
	return map[string]any{
		"type": ProblemBase + "cost-exceeds-limit", "title": "Cost can never be admitted", "status": http.StatusUnprocessableEntity,
		"detail": detail, "plan": d.Plan, "policy": p.Name, "limit": p.Limit, "cost": req.Cost,
		"errors": []map[string]string{{"field": "cost", "message": detail}},
	}
}
