package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

func (s *Server) handleCreateTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		var in entitlements.TenantInput
		if err := decodeBody(c, &in); err != nil {
			return err
		}
		t, err := s.Entitlements.CreateTenant(c.Request().Context(), in)
		if err != nil {
			return err
		}
		c.Response().Header().Set(echo.HeaderLocation, "/admin/v1/tenants/"+t.ID)
		return c.JSON(http.StatusCreated, t)
	}
}

func (s *Server) handleListTenants() echo.HandlerFunc {
	return func(c echo.Context) error {
		q := entitlements.ListQuery{Q: c.QueryParam("q"), Cursor: c.QueryParam("cursor"), ExternalID: c.QueryParam("external_id")}
		if c.QueryParams().Has("external_id") && q.ExternalID == "" {
			return apperr.Invalidf("external_id", "must not be empty")
		}
		if l := c.QueryParam("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil {
				return apperr.Invalidf("limit", "must be a whole number between 1 and 200")
			}
			q.Limit = n
			if n == 0 {
				return apperr.Invalidf("limit", "must be between 1 and 200")
			}
		}
		page, err := s.Entitlements.ListTenants(c.Request().Context(), q)
		if err != nil {
			return err
		}
		// next_cursor is always present: null on the last page.
		var next *string
		if page.NextCursor != "" {
			next = &page.NextCursor
		}
		return c.JSON(http.StatusOK, map[string]any{"tenants": page.Tenants, "next_cursor": next})
	}
}

func (s *Server) handleGetTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		d, err := s.Entitlements.GetTenant(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		if err := s.fillUsage(c.Request().Context(), &d); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, d)
	}
}

// handleUpdateTenant edits a tenant's name and external id (absent fields
// stay; "external_id": null removes it).
func (s *Server) handleUpdateTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		var p entitlements.TenantPatch
		if err := decodeBody(c, &p); err != nil {
			return err
		}
		t, err := s.Entitlements.UpdateTenant(c.Request().Context(), c.Param("id"), p)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, t)
	}
}

func (s *Server) handleChangePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Plan string `json:"plan"`
		}
		if err := decodeBody(c, &body); err != nil {
			return err
		}
		if body.Plan == "" {
			return apperr.Invalidf("plan", "is required")
		}
		var changer entitlements.PlanChanger = s.Entitlements
		if s.PlanChanger != nil {
			changer = s.PlanChanger
		}
		d, err := changer.ChangePlan(c.Request().Context(), c.Param("id"), body.Plan)
		if err != nil {
			return err
		}
		if err := s.fillUsage(c.Request().Context(), &d); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, d)
	}
}

// fillUsage puts the tenant's usage into an admin tenant detail from
// metering's Usage, the one definition of "used" that GET /v1/usage, the
// dashboard and the console read too (entitlements cannot compute it: it
// does not own the usage tables, and metering imports it).
func (s *Server) fillUsage(ctx context.Context, d *entitlements.TenantDetail) error {
	d.Usage = []entitlements.MeterUsage{}
	if s.Metering == nil {
		return nil
	}
	u, err := s.Metering.Usage(ctx, d.ID)
	if err != nil {
		return fmt.Errorf("tenant usage: %w", err)
	}
	for _, m := range u.Meters {
		d.Usage = append(d.Usage, entitlements.MeterUsage{Meter: m.Meter, Used: m.Used, Limit: m.Limit, Mode: m.Mode, Source: m.Source})
	}
	return nil
}
