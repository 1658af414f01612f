package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

func (s *Server) handleCreatePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		var in entitlements.PlanInput
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		p, err := s.Entitlements.CreatePlan(c.Request().Context(), in)
		if err != nil {
			return err
		}
		c.Response().Header().Set(echo.HeaderLocation, "/admin/v1/plans/"+p.Key)
		return c.JSON(http.StatusCreated, p)
	}
}

func (s *Server) handleListPlans() echo.HandlerFunc {
	return func(c echo.Context) error {
		plans, err := s.Entitlements.ListPlans(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"plans": plans})
	}
}

func (s *Server) handleGetPlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := s.Entitlements.GetPlan(c.Request().Context(), c.Param("key"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, p)
	}
}

// handlePatchPlan decodes the body onto the stored plan inside the service's
// transaction: fields present replace, absent ones stay, null removes rate
// or concurrency (unlimited) and a meter set to null loses its quota.
func (s *Server) handlePatchPlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := s.Entitlements.PatchPlan(c.Request().Context(), c.Param("key"), func(in *entitlements.PlanInput) error {
			return decodeJSON(c, in)
		})
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, p)
	}
}
