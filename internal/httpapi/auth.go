package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
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

// requireAdmin guards /admin/v1/*: ADMIN_TOKEN (actor "admin") or one of
// the named ADMIN_TOKENS. Every token is hashed and compared in constant
// time, all of them every time, so neither the length nor which one matched
// leaks. The actor goes into the request's context for the audit trail.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	type cred struct {
		name string
		hash [32]byte
	}
	creds := []cred{{"admin", sha256.Sum256([]byte(s.AdminToken))}}
	for name, tok := range s.AdminTokens {
		creds = append(creds, cred{name, sha256.Sum256([]byte(tok))})
	}
	return func(c echo.Context) error {
		token, ok := bearer(c)
		if !ok {
			return apperr.New(apperr.Unauthorized, "missing bearer token: send Authorization: Bearer <ADMIN_TOKEN>")
		}
		got := sha256.Sum256([]byte(token))
		who := ""
		for _, cr := range creds {
			if subtle.ConstantTimeCompare(got[:], cr.hash[:]) == 1 {
				who = cr.name
			}
		}
		if who == "" {
			return apperr.New(apperr.Unauthorized, "wrong admin token")
		}
		r := c.Request()
		c.SetRequest(r.WithContext(audit.WithActor(r.Context(), audit.Actor{Name: who, Via: audit.ViaAPI})))
		return next(c)
	}
}
