package httpapi

import (
	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// unavailable logs why a dependency failed and answers 503 (Retry-After and
// a problem body come from the error handler).
func (s *Server) unavailable(c echo.Context, err error) error {
	s.log.WarnContext(c.Request().Context(), "dependency failed", "route", c.Path(), "err", err)
	return apperr.New(apperr.Unavailable, "a dependency of this request is unavailable; retry")
}
