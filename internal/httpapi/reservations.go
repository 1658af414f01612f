package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
)

// settleMaxCost bounds the actual cost of a settlement: a charge may go
// beyond the limit (recorded, never refused) but not without bound.
const settleMaxCost = 1_000_000

// settleResponse answers a settlement or a cancellation.
type settleResponse struct {
	ID       string `json:"id"`
	Estimate int64  `json:"estimate"`
	Cost     int64  `json:"cost"`
}

// handleSettleReservation is POST /v1/reservations/{id}/settle {"cost": n}:
// the tenant's reservation is charged n instead of its estimate. Another
// tenant's id, or one settled, cancelled or expired, is 404.
func (s *Server) handleSettleReservation() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Limiter == nil {
			return apperr.New(apperr.Unavailable, "the rate limiter is not configured")
		}
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, checkMaxBytes))
		if err != nil {
			return jsonError(err)
		}
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		var in struct {
			Cost json.RawMessage `json:"cost"`
		}
		if err := decodeJSON(c, &in); err != nil {
			return err
		}
		raw := bytes.TrimSpace(in.Cost)
		n, perr := strconv.ParseInt(string(raw), 10, 64)
		if len(raw) == 0 || perr != nil || n < 0 || n > settleMaxCost {
			return apperr.Invalidf("cost", "must be a whole number from 0 to %d", settleMaxCost)
		}
		return s.settle(c, n)
	}
}

// handleCancelReservation is DELETE /v1/reservations/{id}: the estimate is
// given back.
func (s *Server) handleCancelReservation() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Limiter == nil {
			return apperr.New(apperr.Unavailable, "the rate limiter is not configured")
		}
		return s.settle(c, 0)
	}
}

func (s *Server) settle(c echo.Context, cost int64) error {
	tenant := tenantIDFrom(c)
	id := c.Param("id")
	est, err := s.Limiter.Settle(c.Request().Context(), tenant, id, cost)
	switch {
	case errors.Is(err, limiter.ErrReservationNotFound):
		return apperr.New(apperr.NotFound, "no reservation %q", truncate(id, 40))
	case err != nil:
		return s.limiterError(c, err)
	}
	if c.Request().Method == http.MethodDelete {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, settleResponse{ID: id, Estimate: est, Cost: cost})
}
