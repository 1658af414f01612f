package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/billing"
)

// billingOr503 answers 503 on routes that need billing when it is not wired.
func (s *Server) billingOr503() (*billing.Service, error) {
	if s.Billing == nil {
		return nil, apperr.New(apperr.Unavailable, "Stripe billing is not configured on this server")
	}
	return s.Billing, nil
}

func queryLimit(c echo.Context) (int, error) {
	v := c.QueryParam("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, apperr.Invalidf("limit", "must be a whole number 1-200")
	}
	return n, nil
}

// GET /admin/v1/stripe/events?status=&limit=&cursor=
func (s *Server) handleListStripeEvents() echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := s.billingOr503()
		if err != nil {
			return err
		}
		limit, err := queryLimit(c)
		if err != nil {
			return err
		}
		page, err := b.ListEvents(c.Request().Context(), billing.EventQuery{
			Status: c.QueryParam("status"), Limit: limit, Cursor: c.QueryParam("cursor"),
		})
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, page)
	}
}

// GET /admin/v1/stripe/events/:id (with the payload)
func (s *Server) handleGetStripeEvent() echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := s.billingOr503()
		if err != nil {
			return err
		}
		ev, err := b.GetEvent(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, ev)
	}
}

// POST /admin/v1/stripe/events/:id/replay → 202
func (s *Server) handleReplayStripeEvent() echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := s.billingOr503()
		if err != nil {
			return err
		}
		ev, err := b.Replay(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusAccepted, ev)
	}
}

// POST /admin/v1/tenants/:id/resync → 200 {"repairs": [...]}
func (s *Server) handleResyncTenant() echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := s.billingOr503()
		if err != nil {
			return err
		}
		repairs, err := b.ResyncTenant(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"tenant_id": c.Param("id"), "repairs": repairs})
	}
}

// GET /admin/v1/stripe/drift?tenant_id=&limit=
func (s *Server) handleListDrift() echo.HandlerFunc {
	return func(c echo.Context) error {
		b, err := s.billingOr503()
		if err != nil {
			return err
		}
		limit, err := queryLimit(c)
		if err != nil {
			return err
		}
		repairs, err := b.ListDrift(c.Request().Context(), c.QueryParam("tenant_id"), limit)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"repairs": repairs})
	}
}
