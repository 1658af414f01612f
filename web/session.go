package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/audit"
)

// Session kinds, as stored in web_sessions.kind.
const (
	kindTenant = "tenant"
	kindAdmin  = "admin"
)

// Cookie names. Each cookie is scoped to its area's path, so a dashboard
// session is never even sent to the console.
const (
	cookieTenant = "tg_dashboard"
	cookieAdmin  = "tg_admin"
	// cookiePre carries the login forms' CSRF token before there is a session
	// (double submit), so that nobody can log a victim into their own account.
	cookiePre = "tg_pre"
	csrfField = "csrf"
)

// Session is a logged-in browser.
type Session struct {
	Kind      string
	TenantID  string // "" for admins
	Actor     string // the admin credential's name; "" for tenants
	CSRF      string
	ExpiresAt time.Time
	idHash    []byte
}

// randomToken returns 32 random bytes, URL-safe base64 without padding.
func randomToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("web: crypto/rand failed: " + err.Error()) // never happens on supported systems
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func hashToken(tok string) []byte {
	h := sha256.Sum256([]byte(tok))
	return h[:]
}

// equalConst compares two secrets in constant time; hashing first keeps the
// length from leaking too.
func equalConst(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1 && a != "" && b != ""
}

// credential is what opened a session: the API key (tenant sessions opened
// with a key; "" for a dashboard link) or the hash of the admin token.
type credential struct {
	apiKeyID  string
	adminHash []byte
	actor     string // the admin credential's name, for the audit trail
}

// createSession stores a new session and returns its raw id (the cookie
// value); only the id's hash is kept, with the credential it ends with.
func (s *store) createSession(ctx context.Context, kind, tenantID string, cred credential, ttl time.Duration) (string, Session, error) {
	id := randomToken()
	sess := Session{Kind: kind, TenantID: tenantID, CSRF: randomToken(), idHash: hashToken(id)}
	var tid, kid, who *string
	if tenantID != "" {
		tid = &tenantID
	}
	if cred.apiKeyID != "" {
		kid = &cred.apiKeyID
	}
	if cred.actor != "" {
		sess.Actor = cred.actor
		who = &sess.Actor
	}
	err := s.db.QueryRow(ctx, `
		INSERT INTO web_sessions (id_hash, kind, tenant_id, csrf_token, expires_at, api_key_id, admin_token_hash, actor)
		VALUES ($1, $2, $3, $4, now() + $5::interval, $6, $7, $8) RETURNING expires_at`,
		sess.idHash, kind, tid, sess.CSRF, fmt.Sprintf("%d seconds", int64(ttl.Seconds())), kid, cred.adminHash, who).Scan(&sess.ExpiresAt)
	if err != nil {
		return "", Session{}, fmt.Errorf("web: create session: %w", notFound(err, "tenant"))
	}
	// Expired rows are only garbage; dropping a few here keeps the table small
	// without a job of its own.
	_, _ = s.db.Exec(ctx, `DELETE FROM web_sessions WHERE id_hash IN
		(SELECT id_hash FROM web_sessions WHERE expires_at < now() LIMIT 100)`)
	return id, sess, nil
}

// session loads an unexpired session of the given kind whose credential
// still holds: its API key unrevoked, or (console) the admin token it was
// opened with still the current one (adminHash).
func (s *store) session(ctx context.Context, rawID, kind string, adminHashes [][]byte) (Session, error) {
	if rawID == "" {
		return Session{}, apperr.New(apperr.Unauthorized, "not logged in")
	}
	sess := Session{idHash: hashToken(rawID)}
	var tid, who, key *string
	err := s.db.QueryRow(ctx, `
		SELECT kind, tenant_id::text, csrf_token, expires_at, actor, api_key_id::text FROM web_sessions
		WHERE id_hash = $1 AND kind = $2 AND expires_at > now()
		  AND (kind <> 'admin' OR admin_token_hash = ANY($3))`,
		sess.idHash, kind, adminHashes).Scan(&sess.Kind, &tid, &sess.CSRF, &sess.ExpiresAt, &who, &key)
	errGone := apperr.New(apperr.Unauthorized, "session expired, unknown, or its credential was revoked")
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, errGone
	}
	if err != nil {
		return Session{}, fmt.Errorf("web: session: %w", err)
	}
	if key != nil {
		// The key is credentials': a session lives only while it does.
		live, err := s.creds.KeyLive(ctx, *key)
		if err != nil {
			return Session{}, fmt.Errorf("web: session: %w", err)
		}
		if !live {
			return Session{}, errGone
		}
	}
	if tid != nil {
		sess.TenantID = *tid
	}
	if who != nil {
		sess.Actor = *who
	}
	return sess, nil
}

func (s *store) deleteSession(ctx context.Context, sess Session) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM web_sessions WHERE id_hash = $1`, sess.idHash); err != nil {
		return fmt.Errorf("web: delete session: %w", err)
	}
	return nil
}

// secureRequest reports whether the browser reached us over TLS, directly or
// through a proxy that says so.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setCookie(c echo.Context, name, value, path string, maxAge int) {
	http.SetCookie(c.Response(), &http.Cookie{
		Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secureRequest(c.Request()),
	})
}

func clearCookie(c echo.Context, name, path string) { setCookie(c, name, "", path, -1) }

// ctxKey keys for the echo context.
const ctxSession = "web.session"

func sessionFrom(c echo.Context) Session {
	s, _ := c.Get(ctxSession).(Session)
	return s
}

// requireSession loads the session of kind from its cookie; without one, a
// GET is sent to the login page and anything else is refused.
func (w *Web) requireSession(kind string) echo.MiddlewareFunc {
	name, login := cookieTenant, "/dashboard/login"
	if kind == kindAdmin {
		name, login = cookieAdmin, "/admin/login"
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			raw := ""
			if ck, err := c.Cookie(name); err == nil {
				raw = ck.Value
			}
			sess, err := w.store.session(c.Request().Context(), raw, kind, w.adminHashes())
			if apperr.CodeOf(err) == apperr.Unauthorized {
				if c.Request().Method == http.MethodGet {
					return c.Redirect(http.StatusSeeOther, login)
				}
				return w.renderError(c, http.StatusUnauthorized, "Log in first", "Your session has ended. Log in again.")
			}
			if err != nil {
				return err
			}
			c.Set(ctxSession, sess)
			if sess.Kind == kindAdmin {
				// Console actions are recorded under the credential that
				// opened the session (sessions from before named
				// credentials were ADMIN_TOKEN's).
				who := sess.Actor
				if who == "" {
					who = "admin"
				}
				r := c.Request()
				c.SetRequest(r.WithContext(audit.WithActor(r.Context(), audit.Actor{Name: who, Via: audit.ViaConsole})))
			}
			return next(c)
		}
	}
}

// checkCSRF guards every POST: the form's token must equal the session's
// (or, on the login forms, the pre-session cookie's).
func (w *Web) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().Method != http.MethodPost {
			return next(c)
		}
		want := sessionFrom(c).CSRF
		if want == "" {
			if ck, err := c.Cookie(cookiePre); err == nil {
				want = ck.Value
			}
		}
		if !equalConst(c.FormValue(csrfField), want) {
			return w.renderError(c, http.StatusForbidden, "Form expired",
				"This form was not sent from this site, or it is too old. Go back, reload the page and try again.")
		}
		return next(c)
	}
}

// preToken returns the pre-session CSRF token, setting its cookie if needed.
func preToken(c echo.Context, path string) string {
	if ck, err := c.Cookie(cookiePre); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	tok := randomToken()
	setCookie(c, cookiePre, tok, path, 3600)
	return tok
}

// errTooManyLogins is what an address out of failed logins gets.
var errTooManyLogins = errors.New("web: too many failed logins")

// guardBlocked says whether the address is out of failed logins in bucket
// (only to skip looking up a key that is certainly unknown).
func (w *Web) guardBlocked(c echo.Context, bucket string) bool {
	if w.Guard == nil {
		return false
	}
	return w.Guard.Blocked(c.Request().Context(), bucket, w.Guard.Address(c.Request())) != nil
}

// guardFailed records a failed login; errTooManyLogins once the address has
// no failures left. A valid credential never comes here.
func (w *Web) guardFailed(c echo.Context, bucket string) error {
	if w.Guard == nil {
		return nil
	}
	if err := w.Guard.Failed(c.Request().Context(), bucket, w.Guard.Address(c.Request())); err != nil {
		return errTooManyLogins
	}
	return nil
}
