package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// audited records the admin action of a route audit.Routes declares, with
// the state of its subject before and after; other routes pass through. A
// create (POST /plans, POST /tenants…) names its subject in its answer.
func (s *Server) audited(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route, ok := audit.RouteOf(c.Request().Method, c.Path())
		if s.Audit == nil || !ok {
			return next(c)
		}
		sub := route.Subject(c.Param, nil)
		var body *bytes.Buffer
		if c.Request().Method == http.MethodPost {
			body = &bytes.Buffer{}
			c.Response().Writer = &teeWriter{ResponseWriter: c.Response().Writer, buf: body}
		}
		err := s.Audit.Do(c.Request().Context(), route.Action, sub, func() (audit.Subject, error) {
			if err := next(c); err != nil {
				return audit.Subject{}, err
			}
			if st := c.Response().Status; st >= 400 {
				return audit.Subject{}, errAlreadyAnswered
			}
			var got audit.Subject
			if body != nil {
				var created struct {
					ID  string `json:"id"`
					Key string `json:"key"`
				}
				_ = json.Unmarshal(body.Bytes(), &created)
				id := created.ID // the new object's id (never a key or secret)
				if route.Kind == audit.KindPlan && route.ID == "" {
					id = created.Key
				}
				got = route.Created(id)
			}
			return got, nil
		})
		if errors.Is(err, errAlreadyAnswered) {
			return nil
		}
		return err
	}
}

// errAlreadyAnswered stops the audit of a handler that answered an error
// itself; the answer is on its way, nothing more to send.
var errAlreadyAnswered = errors.New("answered with an error status")

// teeWriter keeps a copy of a create's answer (small JSON) to find the id;
// the copy is dropped with the request.
type teeWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.buf.Len() < 64<<10 {
		w.buf.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

// handleListAudit is GET /admin/v1/audit?tenant=&plan=&actor=&limit=&before=:
// the trail, newest first; "next" pages back.
func (s *Server) handleListAudit() echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.Audit == nil {
			return apperr.New(apperr.Unavailable, "the audit trail is not configured on this server")
		}
		var v apperr.Validation
		f := audit.Filter{TenantID: c.QueryParam("tenant"), PlanKey: c.QueryParam("plan"), Actor: c.QueryParam("actor")}
		if q := c.QueryParam("limit"); q != "" {
			n, err := strconv.Atoi(q)
			if err != nil || n < 1 || n > 200 {
				v.Add("limit", "must be a whole number from 1 to 200")
			}
			f.Limit = n
		}
		if q := c.QueryParam("before"); q != "" {
			n, err := strconv.ParseInt(q, 10, 64)
			if err != nil || n < 1 {
				v.Add("before", "must be an entry id (a positive whole number)")
			}
			f.BeforeID = n
		}
		if f.TenantID != "" && !ids.IsUUID(f.TenantID) {
			v.Add("tenant", "must be a tenant id (UUID)")
		}
		if err := v.Err(); err != nil {
			return err
		}
		if f.Limit == 0 {
			f.Limit = 50
		}
		entries, err := s.Audit.List(c.Request().Context(), f)
		if err != nil {
			return err
		}
		if entries == nil {
			entries = []audit.Entry{}
		}
		out := map[string]any{"entries": entries}
		if len(entries) == f.Limit {
			out["next"] = strconv.FormatInt(entries[len(entries)-1].ID, 10)
		}
		return c.JSON(http.StatusOK, out)
	}
}
