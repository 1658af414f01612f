package httpapi

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// badText says what is wrong with s as text: "" when it is valid UTF-8
// without NUL. Postgres refuses NUL in text and invalid UTF-8, so letting
// either through turns a client's mistake into a 500.
func badText(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	}
	return ""
}

// badJSONText is badText for a raw JSON body: it also finds NUL written as
// the escape \u0000, which decodes to a NUL inside a string.
func badJSONText(b []byte) string {
	if !utf8.Valid(b) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case 0:
			return "contains a NUL character"
		case '\\':
			if i+5 < len(b) && b[i+1] == 'u' && string(b[i+2:i+6]) == "0000" {
				return `contains a NUL character (\u0000)`
			}
			i++ // the escaped character, so that \\u0000 is not taken for one
		}
	}
	return ""
}

// rejectBadText answers 400 problem+json for a path or query string that
// holds NUL or invalid UTF-8 (JSON bodies are checked by decodeJSON), before
// any handler passes them on to Postgres.
func (s *Server) rejectBadText(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if why := badText(r.URL.Path); why != "" {
			return apperr.Invalidf("path", "%s", why)
		}
		if r.URL.RawQuery != "" {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				return apperr.Invalidf("query", "is not a valid query string")
			}
			for k, vs := range q {
				if why := badText(k); why != "" {
					return apperr.Invalidf("query", "parameter name %s", why)
				}
				for _, v := range vs {
					if why := badText(v); why != "" {
						return apperr.Invalidf(k, "%s", why)
					}
				}
			}
		}
		return next(c)
	}
}
