package httpapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

func (s *Server) handleCreatePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		var in catalogue.PlanInput
		if err := decodeBody(c, &in); err != nil {
			return err
		}
		p, err := s.Catalogue.CreatePlan(c.Request().Context(), in)
		if err != nil {
			return err
		}
		c.Response().Header().Set(echo.HeaderLocation, "/admin/v1/plans/"+p.Key)
		return c.JSON(http.StatusCreated, p)
	}
}

func (s *Server) handleListPlans() echo.HandlerFunc {
	return func(c echo.Context) error {
		plans, err := s.Catalogue.ListPlans(c.Request().Context())
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"plans": plans})
	}
}

func (s *Server) handleGetPlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := s.Catalogue.GetPlan(c.Request().Context(), c.Param("key"))
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
		p, err := s.Catalogue.PatchPlan(c.Request().Context(), c.Param("key"), func(in *catalogue.PlanInput) error {
			return decodeBody(c, in)
		})
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, p)
	}
}

// handleMigratePlan moves the tenants grandfathered on an older version of
// the plan to its current one (issue 25); "dry_run": true answers the same
// and changes nothing. Both are audited.
func (s *Server) handleMigratePlan() echo.HandlerFunc {
	return func(c echo.Context) error {
		var in entitlements.MigrateInput
		if err := decodeBody(c, &in); err != nil {
			return err
		}
		m, err := s.Entitlements.MigratePlan(c.Request().Context(), c.Param("key"), in)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, m)
	}
}

// decodeBody is decodeJSON that also answers 413 for a body without
// Content-Length (chunked) that crosses the body limit while being read:
// the limit middleware then fails the read, which decodeJSON alone would
// report as malformed JSON.
func decodeBody(c echo.Context, v any) error {
	tr := &tooLargeReader{ReadCloser: c.Request().Body}
	c.Request().Body = tr
	err := decodeJSON(c, v)
	if tr.tooLarge {
		return apperr.New(apperr.TooLarge, "request body over %s", bodyLimitDefault)
	}
	return err
}

type tooLargeReader struct {
	io.ReadCloser
	tooLarge bool
}

func (r *tooLargeReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.Is(err, echo.ErrStatusRequestEntityTooLarge) || errors.As(err, &mbe) {
		r.tooLarge = true
	}
	return n, err
}
