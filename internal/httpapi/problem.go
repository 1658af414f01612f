package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// ProblemBase prefixes problem type URIs.
const ProblemBase = "https://tollgate.dev/problems/"

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string              `json:"type"`
	Title  string              `json:"title"`
	Status int                 `json:"status"`
	Detail string              `json:"detail,omitempty"`
	Errors []apperr.FieldError `json:"errors,omitempty"`
}

// writeProblem writes p as application/problem+json.
func writeProblem(c echo.Context, p any, status int) error {
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(status)
	return json.NewEncoder(c.Response()).Encode(p)
}

// errorHandler turns every error a handler returns into problem+json. Only
// errors nobody classified are logged, and they answer 500 without details.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var p Problem
	if e, ok := apperr.As(err); ok {
		m := apperr.HTTPOf(e.Code)
		p = Problem{Type: ProblemBase + m.Slug, Title: m.Title, Status: m.Status, Detail: e.Message, Errors: e.Fields}
		if e.Code == apperr.Unauthorized {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
		}
		if e.Code == apperr.Unavailable {
			c.Response().Header().Set("Retry-After", "1")
		}
	} else if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
		p = Problem{Type: ProblemBase + slugFor(he.Code), Title: http.StatusText(he.Code), Status: he.Code, Detail: fmt.Sprint(he.Message)}
		switch he.Code {
		case http.StatusNotFound:
			p.Detail = "no route for " + c.Request().Method + " " + c.Request().URL.Path
		case http.StatusMethodNotAllowed:
			p.Detail = c.Request().Method + " is not allowed on " + c.Request().URL.Path
		case http.StatusRequestEntityTooLarge:
			p.Title = "Request body too large"
		case http.StatusUnauthorized:
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="tollgate"`)
		}
	} else if apperr.Transient(err) {
		// Postgres or Redis down or too slow: the client should retry,
		// and nothing about the connection is shown.
		s.log.WarnContext(c.Request().Context(), "dependency unavailable", "method", c.Request().Method, "route", c.Path(), "err", err)
		c.Response().Header().Set("Retry-After", "1")
		p = Problem{Type: ProblemBase + "unavailable", Title: "Service unavailable", Status: http.StatusServiceUnavailable,
			Detail: "a dependency of this request (database or cache) is unavailable; retry"}
	} else {
		s.log.ErrorContext(c.Request().Context(), "request failed", "method", c.Request().Method, "route", c.Path(), "err", err)
		p = Problem{Type: ProblemBase + "internal", Title: "Internal server error", Status: http.StatusInternalServerError,
			Detail: "the server failed; the error was logged"}
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(p.Status)
		return
	}
	_ = writeProblem(c, p, p.Status)
}

func slugFor(status int) string {
	return strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "-")
}

// decodeJSON reads the request body as one JSON object into v, strictly:
// unknown fields, trailing data and type mismatches are 400s naming the field,
// and so are NUL characters and invalid UTF-8 anywhere in it.
func decodeJSON(c echo.Context, v any) error {
	raw, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return jsonError(err)
	}
	return decodeJSONBytes(raw, v)
}

// decodeJSONBytes is decodeJSON of a body already read.
func decodeJSONBytes(raw []byte, v any) error {
	if why := badJSONText(raw); why != "" {
		return apperr.Invalidf("body", "%s", why)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return apperr.New(apperr.Invalid, "malformed JSON: trailing data after the object")
	}
	if _, err := dec.Token(); err != nil && !errors.Is(err, io.EOF) {
		return apperr.New(apperr.Invalid, "malformed JSON: trailing data after the object")
	}
	return nil
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var mbe *http.MaxBytesError
	var he *echo.HTTPError
	if e, ok := apperr.As(err); ok {
		return e // a field's own decoder named it (entitlements.WindowInputs)
	}
	switch {
	case errors.As(err, &mbe):
		return apperr.New(apperr.TooLarge, "request body over %d bytes", mbe.Limit)
	case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
		// echo's BodyLimit reports a chunked body that crosses the limit
		// while being read this way (no Content-Length to refuse up front).
		return apperr.New(apperr.TooLarge, "request body too large")
	case errors.Is(err, io.EOF):
		return apperr.New(apperr.Invalid, "malformed JSON: empty body")
	case errors.As(err, &syn):
		return apperr.New(apperr.Invalid, "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return apperr.Invalidf(field, "must be %s, not %s", typ.Type.String(), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return apperr.Invalidf(field, "unknown field")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apperr.New(apperr.Invalid, "malformed JSON: unexpected end of body")
	default:
		return apperr.New(apperr.Invalid, "malformed JSON: %v", err)
	}
}
