package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// requireService guards /service/v1/*: the routes of the limiter's remote
// loaders. A service token (tgs_…) or ADMIN_TOKEN is accepted; tenant API
// keys are not.
func (s *Server) requireService(next echo.HandlerFunc) echo.HandlerFunc {
	admin := sha256.Sum256([]byte(s.AdminToken))
	return func(c echo.Context) error {
		token, ok := bearer(c)
		if !ok {
			return apperr.New(apperr.Unauthorized, "missing bearer token: send Authorization: Bearer <service token or ADMIN_TOKEN>")
		}
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], admin[:]) == 1 {
			return next(c)
		}
		if err := s.Credentials.AuthenticateService(c.Request().Context(), token); err != nil {
			return err
		}
		return next(c)
	}
}

// tenantParam is the {id} of a service route: a tenant id, or
// "ext:<external id>" (externalTenant); anything else is a tenant that
// does not exist.
func (s *Server) tenantParam(c echo.Context) (string, error) {
	id := c.Param("id")
	if ext, ok := strings.CutPrefix(id, ExternalIDPrefix); ok {
		return s.externalTenant(c.Request().Context(), id, ext)
	}
	if !ids.IsUUID(id) {
		return "", apperr.New(apperr.NotFound, "no tenant %q", id)
	}
	return id, nil
}

// handleServiceSnapshot returns the tenant's entitlement snapshot in the
// limiter's JSON form, and writes it back to Redis (Redis lost it, or the
// caller would not be asking).
func (s *Server) handleServiceSnapshot() echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.tenantParam(c)
		if err != nil {
			return err
		}
		snap, err := s.Entitlements.ReloadSnapshot(c.Request().Context(), id)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, snap)
	}
}

// ServiceUsage is the body of GET /service/v1/tenants/{id}/usage.
type ServiceUsage struct {
	TenantID    string    `json:"tenant_id"`
	Meter       string    `json:"meter"`
	PeriodStart time.Time `json:"period_start"`
	Used        int64     `json:"used"`
}

// handleServiceUsage returns the durable usage (Postgres) of one meter in
// the period starting at period_start: what the limiter rebuilds a lost
// quota counter from.
func (s *Server) handleServiceUsage() echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.tenantParam(c)
		if err != nil {
			return err
		}
		meter := c.QueryParam("meter")
		if meter == "" {
			meter = keyspace.DefaultMeter
		}
		if len(meter) > 64 || !validMeterName(meter) {
			return apperr.Invalidf("meter", "must be 1-64 characters of a-z, 0-9, '_', '.' or '-'")
		}
		raw := c.QueryParam("period_start")
		if raw == "" {
			return apperr.Invalidf("period_start", "is required (RFC 3339)")
		}
		start, err := time.Parse(time.RFC3339, raw)
		if err != nil {
			return apperr.Invalidf("period_start", "must be an RFC 3339 time")
		}
		ctx := c.Request().Context()
		if _, err := s.Entitlements.GetTenantRow(ctx, id); err != nil {
			return err
		}
		if s.Metering == nil {
			return apperr.New(apperr.Unavailable, "usage is not served by this instance")
		}
		n, err := s.Metering.LoadUsage(ctx, id, meter, start)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, ServiceUsage{TenantID: id, Meter: meter, PeriodStart: start.UTC(), Used: n})
	}
}

// ServiceGrants is the body of GET /service/v1/tenants/{id}/grants.
type ServiceGrants struct {
	TenantID string         `json:"tenant_id"`
	Grants   []ServiceGrant `json:"grants"`
}

// ServiceGrant is one grant as the limiter seeds it into Redis.
type ServiceGrant struct {
	ID          string     `json:"id"`
	Meter       string     `json:"meter"`
	EffectiveAt time.Time  `json:"effective_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	Remaining   int64      `json:"remaining"`
}

// handleServiceGrants returns the tenant's grants the limiter draws, in
// draw order, with the ledger's remaining: what a remote loader's limiter
// rebuilds grants Redis lost from (remote.Client.Grants).
func (s *Server) handleServiceGrants() echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.tenantParam(c)
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		if _, err := s.Entitlements.GetTenantRow(ctx, id); err != nil {
			return err
		}
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		gs, err := cr.RedisGrants(ctx, id)
		if err != nil {
			return err
		}
		out := ServiceGrants{TenantID: id, Grants: make([]ServiceGrant, len(gs))}
		for i, g := range gs {
			out.Grants[i] = ServiceGrant{ID: g.ID, Meter: g.Meter, EffectiveAt: g.EffectiveAt.UTC(), Remaining: g.Remaining}
			if !g.ExpiresAt.IsZero() {
				exp := g.ExpiresAt.UTC()
				out.Grants[i].ExpiresAt = &exp
			}
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, out)
	}
}

func validMeterName(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func (s *Server) handleIssueServiceToken() echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Name string `json:"name"`
		}
		if err := decodeBody(c, &body); err != nil {
			return err
		}
		k, err := s.Credentials.IssueServiceToken(c.Request().Context(), body.Name)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusCreated, k)
	}
}

func (s *Server) handleListServiceTokens() echo.HandlerFunc {
	return func(c echo.Context) error {
		list, err := s.Credentials.ListServiceTokens(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string][]credentials.ServiceTokenSummary{"service_tokens": list})
	}
}

func (s *Server) handleRevokeServiceToken() echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.Credentials.RevokeServiceToken(c.Request().Context(), c.Param("id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
