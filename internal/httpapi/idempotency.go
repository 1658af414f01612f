package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/idempotency"
)

// HeaderIdempotencyKey makes an admin POST safe to retry
// (draft-ietf-httpapi-idempotency-key-header): the same key and body get
// the first answer again (with Idempotent-Replayed: true), the same key with
// another body 422, a key whose first request still runs 409.
const HeaderIdempotencyKey = "Idempotency-Key"

// secretAnswers are the POSTs whose answer holds a secret shown once (an
// API key, a service token, a login link): keeping the answer for a replay
// would store the secret, so they refuse the header instead.
var secretAnswers = map[string]bool{
	"/admin/v1/tenants/:id/api-keys":                true,
	"/admin/v1/service-tokens":                      true,
	"/admin/v1/tenants/:id/dashboard-links":         true,
	"/admin/v1/webhook-endpoints":                   true,
	"/admin/v1/webhook-endpoints/:id/rotate-secret": true,
}

func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < ' ' || k[i] > '~' {
			return false
		}
	}
	return true
}

// idempotent runs after requireAdmin (a key is scoped to its admin actor).
func (s *Server) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		key := r.Header.Get(HeaderIdempotencyKey)
		if r.Method != http.MethodPost || key == "" || s.idem == nil {
			return next(c)
		}
		if !validIdempotencyKey(key) {
			return apperr.Invalidf(HeaderIdempotencyKey, "must be 1 to 255 visible ASCII characters")
		}
		if secretAnswers[c.Path()] {
			return apperr.Invalidf(HeaderIdempotencyKey, "not taken here: the answer holds a secret shown once, which is never stored for a replay")
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err // over the body limit: 413
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		scope := "admin"
		if a, ok := audit.ActorFrom(r.Context()); ok {
			scope = a.Name
		}
		ctx := r.Context()
		prev, err := s.idem.Begin(ctx, scope, key, idempotency.Hash(r.Method, r.URL.Path, body))
		switch {
		case errors.Is(err, idempotency.ErrMismatch):
			return writeProblem(c, map[string]any{
				"type": ProblemBase + "idempotency-key-reused", "title": "Idempotency-Key reused", "status": http.StatusUnprocessableEntity,
				"detail": "this Idempotency-Key was used for another request (another path or body); use a new key for a new request",
				"errors": []map[string]string{{"field": HeaderIdempotencyKey, "message": "used for another request"}},
			}, http.StatusUnprocessableEntity)
		case errors.Is(err, idempotency.ErrInProgress):
			return apperr.New(apperr.Conflict, "the first request with this Idempotency-Key is still in progress; retry in a moment")
		case err != nil:
			return s.unavailable(c, err)
		case prev != nil:
			h := c.Response().Header()
			h.Set("Idempotent-Replayed", "true")
			if prev.ContentType != "" {
				h.Set(echo.HeaderContentType, prev.ContentType)
			}
			c.Response().WriteHeader(prev.Status)
			_, _ = c.Response().Write(prev.Body)
			return nil
		}
		buf := &bytes.Buffer{}
		c.Response().Writer = &teeWriter{ResponseWriter: c.Response().Writer, buf: buf}
		herr := next(c)
		if herr != nil {
			c.Error(herr) // write the answer now, so that it can be kept
		}
		bg := context.WithoutCancel(ctx)
		st := c.Response().Status
		if st >= 500 || st == 0 || buf.Len() >= 64<<10 {
			// A failure is not an answer to keep: a retry runs again.
			if err := s.idem.Abandon(bg, scope, key); err != nil {
				s.log.WarnContext(ctx, "idempotency key not released", "err", err)
			}
			return nil
		}
		ct := c.Response().Header().Get(echo.HeaderContentType)
		if err := s.idem.Finish(bg, scope, key, idempotency.Answer{Status: st, ContentType: strings.TrimSpace(ct), Body: buf.Bytes()}); err != nil {
			s.log.WarnContext(ctx, "idempotency answer not kept", "err", err)
		}
		return nil
	}
}
