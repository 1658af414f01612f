package httpapi

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/credits"
)

// creditsService is Deps.Credits, or a 503 when the server has none.
func (s *Server) creditsService() (*credits.Service, error) {
	if s.Credits == nil {
		return nil, apperr.New(apperr.Unavailable, "credits are not configured on this server")
	}
	return s.Credits, nil
}

// grantError answers a grant of a meter no plan defines as POST /v1/check
// answers such a meter (422, type unknown-meter); other errors go to the
// error handler.
func grantError(c echo.Context, err error) error {
	var um *credits.UnknownMeterError
	if errors.As(err, &um) {
		msg := um.Error()
		return writeProblem(c, map[string]any{
			"type": ProblemBase + "unknown-meter", "title": "Unknown meter", "status": http.StatusUnprocessableEntity,
			"detail": msg, "errors": []map[string]string{{"field": "meter", "message": msg}},
		}, http.StatusUnprocessableEntity)
	}
	return err
}

// handleCreateGrant answers POST /admin/v1/tenants/{id}/grants: 201 with
// the grant.
func (s *Server) handleCreateGrant() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		var in credits.GrantInput
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		g, err := cr.Create(c.Request().Context(), c.Param("id"), in)
		if err != nil {
			return grantError(c, err)
		}
		return c.JSON(http.StatusCreated, g)
	}
}

// handleListGrants answers GET /admin/v1/tenants/{id}/grants: every grant
// of the tenant, active and past, oldest first.
func (s *Server) handleListGrants() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		l, err := cr.List(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"grants": l})
	}
}

// handleVoidGrant answers POST /admin/v1/grants/{id}/void: 200 with the
// grant, voided_at set.
func (s *Server) handleVoidGrant() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		g, err := cr.Void(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, g)
	}
}

// handlePutTopup answers PUT /admin/v1/topups/{price_id}: 201 when the
// price is newly mapped, 200 when its mapping was replaced.
func (s *Server) handlePutTopup() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		var in credits.TopupInput
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		t, created, err := cr.PutTopup(c.Request().Context(), c.Param("price_id"), in)
		if err != nil {
			return grantError(c, err)
		}
		if created {
			return c.JSON(http.StatusCreated, t)
		}
		return c.JSON(http.StatusOK, t)
	}
}

// handleListTopups answers GET /admin/v1/topups.
func (s *Server) handleListTopups() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		l, err := cr.ListTopups(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"topups": l})
	}
}

// handleGetTopup answers GET /admin/v1/topups/{price_id}.
func (s *Server) handleGetTopup() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		t, err := cr.GetTopup(c.Request().Context(), c.Param("price_id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, t)
	}
}

// handleDeleteTopup answers DELETE /admin/v1/topups/{price_id}: 204; the
// grants it made stay.
func (s *Server) handleDeleteTopup() echo.HandlerFunc {
	return func(c echo.Context) error {
		cr, err := s.creditsService()
		if err != nil {
			return err
		}
		if err := cr.DeleteTopup(c.Request().Context(), c.Param("price_id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
