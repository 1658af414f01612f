package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// handleIssueKey answers with the raw key, the only time it is ever shown;
// the response must not be cached anywhere on the way.
func (s *Server) handleIssueKey() echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Name string `json:"name"`
		}
		if c.Request().ContentLength != 0 {
			if err := decodeBody(c, &body); err != nil {
				return err
			}
		}
		k, err := s.Credentials.IssueKey(c.Request().Context(), c.Param("id"), body.Name)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusCreated, k)
	}
}

func (s *Server) handleListKeys() echo.HandlerFunc {
	return func(c echo.Context) error {
		keys, err := s.Credentials.ListKeys(c.Request().Context(), c.Param("id"))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"api_keys": keys})
	}
}

func (s *Server) handleRevokeKey() echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.Credentials.RevokeKey(c.Request().Context(), c.Param("id")); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}
