package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// handleUsage answers GET /v1/usage: the current period's usage per meter.
// Reading usage never consumes quota.
func (s *Server) handleUsage() echo.HandlerFunc {
	return func(c echo.Context) error {
		u, err := s.Metering.Usage(c.Request().Context(), tenantIDFrom(c))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, u)
	}
}

// handleUsageEvents answers POST /v1/usage/events: a batch of 1 to 1000
// events, validated whole (one bad event stores nothing) and counted once
// per id, forever. Recording usage never consumes quota.
func (s *Server) handleUsageEvents() echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Events []json.RawMessage `json:"events"`
		}
		// The body is read whole first: echo's BodyLimit reader reports an
		// over-long body without Content-Length as its own 413, which the
		// JSON decoder would turn into a 400.
		raw, err := io.ReadAll(c.Request().Body)
		if err != nil {
			var he *echo.HTTPError
			if errors.As(err, &he) {
				return he
			}
			return apperr.New(apperr.Invalid, "reading the body: %v", err)
		}
		c.Request().Body = io.NopCloser(bytes.NewReader(raw))
		if err := decodeJSON(c, &body); err != nil {
			return err
		}
		evs, err := s.Metering.ParseEvents(body.Events)
		if err != nil {
			return err
		}
		res, err := s.Metering.Ingest(c.Request().Context(), tenantIDFrom(c), evs)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, res)
	}
}
