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
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Type != nil {
			if field, ok := pathAt(raw, typ.Offset); ok {
				return apperr.Invalidf(field, "must be %s, not %s", typ.Type.String(), typ.Value)
			}
		}
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

// pathAt names the value of raw that ends at offset (where encoding/json
// reports a type mismatch) as the API names fields: map keys included
// ("quotas.tokens.limit"; json's own Field leaves out map keys and says
// "quotas.limit") and array elements as [i].
func pathAt(raw []byte, offset int64) (string, bool) {
	type level struct {
		object bool
		key    string // the member being read (object)
		index  int    // the element being read (array)
		inKey  bool   // object: the next string is a key
	}
	var stack []level
	name := func() string {
		var b strings.Builder
		for _, l := range stack {
			if l.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			} else {
				fmt.Fprintf(&b, "[%d]", l.index)
			}
		}
		return b.String()
	}
	// after moves a container past the value just read.
	after := func(l *level) {
		if l.object {
			l.inKey = true
		} else {
			l.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].object && stack[top].inKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:top]
				if top > 0 {
					after(&stack[top-1])
				}
				continue
			}
			stack[top].key, _ = tok.(string)
			stack[top].inKey = false
			continue
		}
		// tok is a value (or the end of an array).
		end := dec.InputOffset()
		switch d, _ := tok.(json.Delim); d {
		case '{', '[':
			if end == offset && top >= 0 {
				return name(), true
			}
			stack = append(stack, level{object: d == '{', inKey: d == '{'})
			continue
		case ']':
			stack = stack[:top]
			if top > 0 {
				after(&stack[top-1])
			}
			continue
		}
		if end == offset && top >= 0 {
			return name(), true
		}
		if top >= 0 {
			after(&stack[top])
		}
		if top < 0 {
			return "", false
		}
	}
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var mbe *http.MaxBytesError
	var he *echo.HTTPError
	if e, ok := apperr.As(err); ok {
		return e // a field's own decoder named it (catalogue.WindowInputs)
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
