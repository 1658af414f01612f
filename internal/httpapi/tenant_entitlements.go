package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/limiter"
)

// entitlementsBody is the contract's GET /v1/entitlements shape.
type entitlementsBody struct {
	TenantID    string                   `json:"tenant_id"`
	Plan        string                   `json:"plan"`
	Status      string                   `json:"status"`
	Features    []string                 `json:"features"`
	Rate        *limiter.Rate            `json:"rate"`        // null = unlimited
	Concurrency *int64                   `json:"concurrency"` // null = unlimited
	Quotas      map[string]limiter.Quota `json:"quotas"`
	Period      periodBody               `json:"period"`
	Version     int64                    `json:"version"`
	// PlanVersion is the version of the plan whose limits apply (a
	// grandfathered tenant keeps an older one).
	PlanVersion int64 `json:"plan_version,omitempty"`
}

type periodBody struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

func (s *Server) handleEntitlements() echo.HandlerFunc {
	return func(c echo.Context) error {
		snap, err := s.Entitlements.CachedSnapshot(c.Request().Context(), tenantIDFrom(c))
		if err != nil {
			return err
		}
		b := entitlementsBody{
			TenantID: snap.TenantID, Plan: snap.Plan, Status: snap.Status, Features: snap.Features,
			Rate: snap.Rate, Quotas: snap.Quotas, Version: snap.Version, PlanVersion: snap.PlanVersion,
			Period: periodBody{Start: snap.PeriodStart, End: snap.PeriodEnd},
		}
		if snap.Concurrency > 0 {
			b.Concurrency = &snap.Concurrency
		}
		if b.Features == nil {
			b.Features = []string{}
		}
		if b.Quotas == nil {
			b.Quotas = map[string]limiter.Quota{}
		}
		return c.JSON(http.StatusOK, b)
	}
}
