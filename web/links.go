package web

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// LinkTTL is how long a dashboard link may be used.
const LinkTTL = 15 * time.Minute

// MintLink makes a single-use dashboard login link for the tenant, valid for
// LinkTTL. The token is 32 random bytes and only its SHA-256 is stored, so
// the database never holds a usable link; an unknown tenant is NotFound.
// The link is absolute under PublicURL when that is set, else a path.
// httpapi's POST /admin/v1/tenants/{id}/dashboard-links calls it.
func (w *Web) MintLink(ctx context.Context, tenantID string) (string, time.Time, error) {
	if !ids.IsUUID(tenantID) {
		return "", time.Time{}, apperr.New(apperr.NotFound, "tenant not found")
	}
	tok := randomToken()
	var exp time.Time
	err := w.store.db.QueryRow(ctx, `
		INSERT INTO dashboard_links (token_hash, tenant_id, expires_at)
		VALUES ($1, $2, now() + $3::interval) RETURNING expires_at`,
		hashToken(tok), tenantID, fmt.Sprintf("%d seconds", int64(LinkTTL.Seconds()))).Scan(&exp)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("web: mint link: %w", notFound(err, "tenant"))
	}
	link := "/dashboard/login?token=" + url.QueryEscape(tok)
	// With PUBLIC_URL the link is whole: an admin pastes it into a mail,
	// where a path alone leads nowhere.
	if base := strings.TrimRight(w.PublicURL, "/"); base != "" {
		link = base + link
	}
	return link, exp.UTC(), nil
}

// errLinkUsed is what a used, expired or unknown link gets: the three are not
// told apart, so a link cannot be probed.
var errLinkUsed = apperr.New(apperr.Unauthorized, "this link was already used or has expired")

// peekLink returns the tenant of a still-usable link without using it (the
// page that asks "continue?" must not burn a link that a mail scanner fetched).
func (s *store) peekLink(ctx context.Context, tok string) (string, error) {
	if tok == "" {
		return "", errLinkUsed
	}
	var tid string
	err := s.db.QueryRow(ctx, `
		SELECT tenant_id::text FROM dashboard_links
		WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()`, hashToken(tok)).Scan(&tid)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errLinkUsed
	}
	if err != nil {
		return "", fmt.Errorf("web: peek link: %w", err)
	}
	return tid, nil
}

// useLink marks the link used and returns its tenant, in one statement, so
// two concurrent uses cannot both succeed.
func (s *store) useLink(ctx context.Context, tok string) (string, error) {
	if tok == "" {
		return "", errLinkUsed
	}
	var tid string
	err := s.db.QueryRow(ctx, `
		UPDATE dashboard_links SET used_at = now()
		WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()
		RETURNING tenant_id::text`, hashToken(tok)).Scan(&tid)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errLinkUsed
	}
	if err != nil {
		return "", fmt.Errorf("web: use link: %w", err)
	}
	// Old links are only garbage.
	_, _ = s.db.Exec(ctx, `DELETE FROM dashboard_links WHERE token_hash IN
		(SELECT token_hash FROM dashboard_links WHERE expires_at < now() - interval '1 day' LIMIT 100)`)
	return tid, nil
}
