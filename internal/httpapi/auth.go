package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// bearer returns the token of an "Authorization: Bearer …" header.
func bearer(c echo.Context) (string, bool) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// requireAdmin guards /admin/v1/*. Both sides are hashed before the
// constant-time compare so that the token's length does not leak either.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	want := sha256.Sum256([]byte(s.AdminToken))
	return func(c echo.Context) error {
		token, ok := bearer(c)
		if !ok {
			return apperr.New(apperr.Unauthorized, "missing bearer token: send Authorization: Bearer <ADMIN_TOKEN>")
		}
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return apperr.New(apperr.Unauthorized, "wrong admin token")
		}
		return next(c)
	}
}
