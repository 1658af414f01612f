package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// audited records the route's admin action in the audit trail, with the
// state of its subject before and after. The subject comes from the route:
// /tenants/:id…, /plans/:key, /api-keys/:id, /stripe/events/:id,
// /addons/:price_id, /service-tokens/:id, /grants/:id; a create (POST /plans, POST
// /tenants, POST /service-tokens) names it in its answer.
func (s *Server) audited(action string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if s.Audit == nil {
				return next(c)
			}
			var sub audit.Subject
			path := c.Path()
			switch {
			case strings.HasSuffix(path, "/grants") || strings.Contains(path, "/grants/:id"):
				// A grant's before and after are the grant itself (credits').
				if strings.Contains(path, "/tenants/:id") {
					sub.TenantID = c.Param("id")
				} else if s.Credits != nil {
					sub.Target = c.Param("id")
					sub.TenantID = s.Credits.TenantOf(c.Request().Context(), sub.Target)
				}
				if s.Credits != nil {
					sub.State = s.Credits.State
				}
			case strings.Contains(path, "/topups/:price_id"):
				sub.Target = c.Param("price_id")
				if s.Credits != nil {
					sub.State = s.Credits.TopupState
				}
			case strings.Contains(path, "/tenants/:id"):
				sub.TenantID = c.Param("id")
				sub.Target = c.Param("override_id")
			case strings.Contains(path, "/plans/:key"):
				sub.PlanKey = c.Param("key")
			case strings.Contains(path, "/api-keys/:id"):
				sub.KeyID = c.Param("id")
			case strings.Contains(path, "/stripe/events/:id"):
				sub.EventID = c.Param("id")
			case strings.Contains(path, "/addons/:price_id"):
				sub.AddonPriceID = c.Param("price_id")
				sub.Target = sub.AddonPriceID
			case strings.Contains(path, "/service-tokens/:id"):
				sub.ServiceTokenID = c.Param("id")
				sub.Target = sub.ServiceTokenID
			case strings.Contains(path, "/webhook-endpoints/:id"):
				sub.Target = c.Param("id")
			}
			var body *bytes.Buffer
			if c.Request().Method == http.MethodPost {
				body = &bytes.Buffer{}
				c.Response().Writer = &teeWriter{ResponseWriter: c.Response().Writer, buf: body}
			}
			err := s.Audit.Do(c.Request().Context(), action, sub, func() (audit.Subject, error) {
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
					switch {
					case strings.HasSuffix(path, "/plans"):
						got.PlanKey = created.Key
					case strings.HasSuffix(path, "/tenants"):
						got.TenantID = created.ID
					case strings.HasSuffix(path, "/service-tokens"):
						// The id names it; the answer's token never leaves this function.
						got.ServiceTokenID, got.Target = created.ID, created.ID
					default: // the new key's, override's or webhook endpoint's id (never a key or secret)
						got.Target = created.ID
					}
				}
				return got, nil
			})
			if errors.Is(err, errAlreadyAnswered) {
				return nil
			}
			return err
		}
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
