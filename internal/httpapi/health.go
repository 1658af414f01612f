package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

func (s *Server) handleHealthz() echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}
}

// handleReadyz answers 503 naming the dependency that does not answer, so an
// operator knows which one to look at.
func (s *Server) handleReadyz() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		checks := map[string]string{"postgres": "ok", "redis": "ok"}
		failing := ""
		// The errors name users, hosts and databases: they go to the log,
		// and this unauthenticated answer only says which one is down.
		if err := s.DB.Ping(ctx); err != nil {
			checks["postgres"], failing = "down", "postgres"
			s.log.WarnContext(ctx, "readyz: postgres does not answer", "err", err)
		}
		if err := s.Redis.Ping(ctx).Err(); err != nil {
			checks["redis"] = "down"
			if failing == "" {
				failing = "redis"
			} else {
				failing = "postgres and redis"
			}
			s.log.WarnContext(ctx, "readyz: redis does not answer", "err", err)
		}
		if failing != "" {
			return writeProblem(c, map[string]any{
				"type": ProblemBase + "not-ready", "title": "Not ready", "status": http.StatusServiceUnavailable,
				"detail": failing + " does not answer (details in the log)", "checks": checks,
			}, http.StatusServiceUnavailable)
		}
		return c.JSON(http.StatusOK, map[string]any{"status": "ready", "checks": checks})
	}
}

// handleMetrics serves /metrics on the public port: behind MetricsToken when
// it is set; else 404 when MetricsElsewhere (cmd/api serves them on
// METRICS_ADDR, so nothing public leaks by default); else open (tests).
func (s *Server) handleMetrics() echo.HandlerFunc {
	h := echo.WrapHandler(MetricsHandler(s.Registry, s.MetricsToken))
	return func(c echo.Context) error {
		if s.MetricsToken == "" && s.MetricsElsewhere {
			return apperr.New(apperr.NotFound, "metrics are not served on this port: scrape METRICS_ADDR, or set METRICS_TOKEN to serve them here behind it")
		}
		return h(c)
	}
}
