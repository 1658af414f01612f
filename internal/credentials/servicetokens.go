package credentials

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// Service tokens are the credentials of backends that run the limiter
// outside Tollgate: "tgs_" and 32 random bytes in base62. They can read
// snapshots and durable usage (the limiter's remote loaders) and nothing
// else; the routes that accept them also accept ADMIN_TOKEN. They are rare
// calls (a snapshot or counter missing from Redis), so every use asks
// Postgres: a revocation applies at once on every instance.
const serviceScheme = "tgs_"

// IssuedServiceToken is a new service token: Token is shown once, here.
type IssuedServiceToken struct {
	ID        string    `json:"id"`
	Token     string    `json:"token"`
	Prefix    string    `json:"prefix"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// ServiceTokenSummary describes a stored service token without its secret.
type ServiceTokenSummary struct {
	ID         string     `json:"id"`
	Prefix     string     `json:"prefix"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// IsServiceToken says whether raw has the form of a service token.
func IsServiceToken(raw string) bool {
	return strings.HasPrefix(raw, serviceScheme) && len(raw) == len(serviceScheme)+keyBodyLen
}

// IssueServiceToken makes a new service token. Only its hash is stored.
func (s *Service) IssueServiceToken(ctx context.Context, name string) (IssuedServiceToken, error) {
	name = strings.TrimSpace(name)
	if name == "" || !cleanName(name) {
		return IssuedServiceToken{}, apperr.Invalidf("name", "must be 1-%d characters without control characters", maxNameLen)
	}
	raw, err := newCredential(serviceScheme)
	if err != nil {
		return IssuedServiceToken{}, err
	}
	k := IssuedServiceToken{Token: raw, Prefix: raw[:keyPrefixLen+1], Name: name}
	err = s.db.QueryRow(ctx, `
INSERT INTO service_tokens (prefix, hash, name) VALUES ($1, $2, $3)
RETURNING id::text, created_at`, k.Prefix, hashKey(raw), name).Scan(&k.ID, &k.CreatedAt)
	if err != nil {
		return IssuedServiceToken{}, fmt.Errorf("credentials: issue service token: %w", err)
	}
	s.log.InfoContext(ctx, "service token issued", "token_id", k.ID, "token_prefix", k.Prefix)
	return k, nil
}

// ListServiceTokens lists the service tokens, newest first.
func (s *Service) ListServiceTokens(ctx context.Context) ([]ServiceTokenSummary, error) {
	rows, err := s.db.Query(ctx, `
SELECT id::text, prefix, name, created_at, last_used_at, revoked_at FROM service_tokens
 ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, fmt.Errorf("credentials: list service tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ServiceTokenSummary])
	if err != nil {
		return nil, fmt.Errorf("credentials: list service tokens: %w", err)
	}
	if out == nil {
		out = []ServiceTokenSummary{}
	}
	return out, nil
}

// RevokeServiceToken revokes a service token; revoking twice is a no-op,
// an unknown id NotFound.
func (s *Service) RevokeServiceToken(ctx context.Context, id string) error {
	if !ids.IsUUID(id) {
		return apperr.New(apperr.NotFound, "no service token %q", id)
	}
	tag, err := s.db.Exec(ctx, `UPDATE service_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("credentials: revoke service token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return apperr.New(apperr.NotFound, "no service token %q", id)
	}
	s.log.InfoContext(ctx, "service token revoked", "token_id", id)
	return nil
}

// AuthenticateService checks a service token: Unauthorized unless it is a
// live one. last_used_at is written at most once a minute per token.
func (s *Service) AuthenticateService(ctx context.Context, raw string) error {
	if !IsServiceToken(raw) {
		return apperr.New(apperr.Unauthorized, "invalid service token")
	}
	var id string
	err := s.db.QueryRow(ctx, `
UPDATE service_tokens SET last_used_at = CASE
         WHEN last_used_at IS NULL OR last_used_at < now() - interval '1 minute' THEN now()
         ELSE last_used_at END
 WHERE hash = $1 AND revoked_at IS NULL
RETURNING id::text`, hashKey(raw)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return apperr.New(apperr.Unauthorized, "invalid service token")
	}
	if err != nil {
		s.log.ErrorContext(ctx, "service token lookup failed", "err", err)
		return apperr.New(apperr.Unavailable, "cannot check service tokens right now; retry")
	}
	return nil
}
