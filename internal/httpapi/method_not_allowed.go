package httpapi

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// routeNotFound replaces the catch-all that echo registers for a group with
// middleware: that catch-all matches every method, so without this a wrong
// method on a known path (DELETE /admin/v1/plans) would be a 404, not the 405
// the contract promises. It asks the router whether another method serves the
// path and answers 405 with Allow when one does.
func (s *Server) routeNotFound(c echo.Context) error {
	req := c.Request()
	path := req.URL.RawPath
	if path == "" {
		path = req.URL.Path
	}
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == req.Method {
			continue
		}
		probe := s.echo.NewContext(req, nil)
		s.echo.Router().Find(m, path, probe)
		if p := probe.Path(); p != "" && !strings.HasSuffix(p, "/*") && probe.Handler() != nil && p != strings.TrimSuffix(c.Path(), "/*") {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return echo.ErrNotFound
	}
	c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
	return echo.ErrMethodNotAllowed
}
