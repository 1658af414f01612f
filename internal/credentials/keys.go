package credentials

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/limitstore"
)

// API key format: "tg_" and 32 random bytes in base62 (43 characters).
const (
	keyScheme    = "tg_"
	keyBodyLen   = 43
	keyPrefixLen = 12
)

// IssuedKey is a new API key: Key is shown once, here, and never again.
type IssuedKey struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Prefix    string    `json:"prefix"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// KeyInfo is what an API key authenticates.
type KeyInfo struct {
	KeyID    string
	TenantID string
}

// KeySummary describes a stored key without its secret.
type KeySummary struct {
	ID         string     `json:"id"`
	Prefix     string     `json:"prefix"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// maxNameLen is the longest name of a key or token (the tables' CHECK).
const maxNameLen = 200

// cleanName reports whether name fits the tables: at most maxNameLen
// characters, valid UTF-8 without control characters.
func cleanName(name string) bool {
	return len([]rune(name)) <= maxNameLen && utf8.ValidString(name) && !strings.ContainsFunc(name, unicode.IsControl)
}

// hashKey is the stored form of a key.
func hashKey(raw string) []byte {
	h := sha256.Sum256([]byte(raw))
	return h[:]
}

func newRawKey() (string, error) { return newCredential(keyScheme) }

// newCredential is a scheme ("tg_", "tgs_") and 32 random bytes in base62,
// zero-padded to a fixed 43 characters so a credential's form is checkable
// without a lookup.
func newCredential(scheme string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("credentials: random credential: %w", err)
	}
	body := new(big.Int).SetBytes(b[:]).Text(62)
	return scheme + strings.Repeat("0", keyBodyLen-len(body)) + body, nil
}

// IssueKey makes a new API key for the tenant. Only its hash is stored.
func (s *Service) IssueKey(ctx context.Context, tenantID, name string) (IssuedKey, error) {
	name = strings.TrimSpace(name)
	if !cleanName(name) {
		return IssuedKey{}, apperr.Invalidf("name", "must be at most %d characters without control characters", maxNameLen)
	}
	if _, err := s.tenants.GetTenantRow(ctx, tenantID); err != nil {
		return IssuedKey{}, fmt.Errorf("credentials: issue key: %w", err)
	}
	raw, err := newRawKey()
	if err != nil {
		return IssuedKey{}, err
	}
	k := IssuedKey{Key: raw, Prefix: raw[:keyPrefixLen], Name: name}
	err = s.db.QueryRow(ctx, `
INSERT INTO api_keys (tenant_id, prefix, hash, name) VALUES ($1, $2, $3, $4)
RETURNING id::text, created_at`, tenantID, k.Prefix, hashKey(raw), name).Scan(&k.ID, &k.CreatedAt)
	if err != nil {
		var pe interface{ SQLState() string }
		if errors.As(err, &pe) && pe.SQLState() == "23503" {
			return IssuedKey{}, apperr.New(apperr.NotFound, "no tenant %q", tenantID) // deleted meanwhile
		}
		return IssuedKey{}, fmt.Errorf("credentials: issue key: %w", err)
	}
	sum := hashKey(raw)
	s.index.add(indexID(sum))
	if s.opts.Redis != nil {
		// Other instances learn of the key for their index; if this fails
		// they still look it up in Postgres, except for an address that
		// has used up its failed logins, until their next resubscription.
		pctx, cancel := context.WithTimeout(ctx, s.opts.RedisTimeout)
		err := s.opts.Redis.Publish(pctx, s.RevokedChannel(), "+"+hex.EncodeToString(sum)).Err()
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "publishing a new api key to the key index failed", "key_id", k.ID, "err", err)
		}
	}
	s.log.InfoContext(ctx, "api key issued", "tenant_id", tenantID, "key_id", k.ID, "key_prefix", k.Prefix)
	return k, nil
}

// ListKeys lists the tenant's keys, newest first, without their secrets.
func (s *Service) ListKeys(ctx context.Context, tenantID string) ([]KeySummary, error) {
	if _, err := s.tenants.GetTenantRow(ctx, tenantID); err != nil {
		return nil, fmt.Errorf("credentials: list keys: %w", err)
	}
	rows, err := s.db.Query(ctx, `
SELECT id::text, prefix, name, created_at, last_used_at, revoked_at FROM api_keys
 WHERE tenant_id = $1 ORDER BY created_at DESC, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("credentials: list keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[KeySummary])
	if err != nil {
		return nil, fmt.Errorf("credentials: list keys: %w", err)
	}
	if keys == nil {
		keys = []KeySummary{}
	}
	return keys, nil
}

// RevokeKey revokes a key at once on every instance: the revocation is
// committed, then the key's hash is published so that every Service drops it
// from its cache. A publish Redis does not take in time is retried by Run
// until it is sent or KeyCacheTTL has passed; the revocation is in force
// either way, so it is not an error. Revoking a revoked key is a no-op (and
// publishes again); an unknown one NotFound.
func (s *Service) RevokeKey(ctx context.Context, keyID string) error {
	if !ids.IsUUID(keyID) {
		return apperr.New(apperr.NotFound, "no API key %q", keyID)
	}
	var (
		hash     []byte
		tenantID string
	)
	err := s.db.QueryRow(ctx, `
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1
RETURNING hash, tenant_id::text`, keyID).Scan(&hash, &tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return apperr.New(apperr.NotFound, "no API key %q", keyID)
	}
	if err != nil {
		return fmt.Errorf("credentials: revoke key: %w", err)
	}
	h := hex.EncodeToString(hash)
	s.keys.revoke(h)
	s.index.remove(indexID(hash))
	if s.opts.Redis != nil {
		// Committed means done (publishRetried's policy): answering an
		// error would hang or fail a revocation that is in force. Other
		// instances trust their cache for at most KeyCacheTTL; until then
		// Run keeps publishing, so they drop the key as soon as Redis
		// answers again.
		err := limitstore.Retry(ctx, s.opts.RedisTimeout, func(ctx context.Context) error { return s.publishRevocation(ctx, h) })
		if err != nil {
			s.log.ErrorContext(ctx, "publishing api key revocation failed; retried in the background", "key_id", keyID, "err", err)
			s.unsentMu.Lock()
			s.unsent[h] = s.opts.Now()
			s.unsentMu.Unlock()
		}
	}
	s.log.InfoContext(ctx, "api key revoked", "tenant_id", tenantID, "key_id", keyID)
	return nil
}

func (s *Service) publishRevocation(ctx context.Context, hash string) error {
	return s.opts.Redis.Publish(ctx, s.RevokedChannel(), hash).Err()
}

// resendRevocations publishes, every second until ctx ends, the
// revocations whose publish failed, dropping each once sent or once
// KeyCacheTTL has passed (every instance has re-read Postgres by then).
func (s *Service) resendRevocations(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.unsentMu.Lock()
		due := make(map[string]time.Time, len(s.unsent))
		for h, at := range s.unsent {
			due[h] = at
		}
		s.unsentMu.Unlock()
		for h, at := range due {
			done := s.opts.Now().Sub(at) > s.opts.KeyCacheTTL
			if !done {
				pctx, cancel := context.WithTimeout(ctx, s.opts.RedisTimeout)
				done = s.publishRevocation(pctx, h) == nil
				cancel()
			}
			if done {
				s.unsentMu.Lock()
				delete(s.unsent, h)
				s.unsentMu.Unlock()
			}
		}
	}
}

// Authenticate maps a raw API key to its tenant. Unknown, malformed and
// revoked keys are Unauthorized. In steady state it answers from memory.
func (s *Service) Authenticate(ctx context.Context, rawKey string) (KeyInfo, error) {
	return s.AuthenticateKey(ctx, rawKey, false)
}

// AuthenticateKey is Authenticate; with suspect (the caller's address has
// used up its failed logins) a key that the in-process key index does not
// know is refused without asking Postgres, so a flood of made-up keys costs
// no query while a real key still authenticates.
func (s *Service) AuthenticateKey(ctx context.Context, rawKey string, suspect bool) (KeyInfo, error) {
	if !strings.HasPrefix(rawKey, keyScheme) || len(rawKey) != len(keyScheme)+keyBodyLen {
		return KeyInfo{}, apperr.New(apperr.Unauthorized, "invalid API key")
	}
	sum := hashKey(rawKey)
	h := hex.EncodeToString(sum)
	now := s.opts.Now()
	e, ok, epoch, refresh := s.keys.get(h, now)
	if ok {
		if !e.ok {
			return KeyInfo{}, apperr.New(apperr.Unauthorized, "invalid API key")
		}
		if refresh {
			s.askRefresh(sum)
		}
		s.touch(ctx, e.info.KeyID, now)
		return e.info, nil
	}
	if suspect {
		if known, live := s.index.known(sum); live && !known {
			return KeyInfo{}, apperr.New(apperr.Unauthorized, "invalid API key")
		}
	}
	var info KeyInfo
	err := s.db.QueryRow(ctx, `SELECT id::text, tenant_id::text FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`, sum).
		Scan(&info.KeyID, &info.TenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		s.keys.put(h, keyEntry{expires: now.Add(s.opts.NegativeCacheTTL)}, epoch)
		return KeyInfo{}, apperr.New(apperr.Unauthorized, "invalid API key")
	}
	if err != nil {
		if ctx.Err() != nil {
			// The caller went away (a client hung up, a gateway's own
			// deadline): nothing is wrong with Postgres, so no ERROR line.
			return KeyInfo{}, apperr.New(apperr.Unavailable, "request cancelled")
		}
		s.log.ErrorContext(ctx, "api key lookup failed", "err", err)
		return KeyInfo{}, apperr.New(apperr.Unavailable, "cannot check API keys right now; retry")
	}
	s.keys.put(h, s.knownEntry(info, now), epoch)
	s.touch(ctx, info.KeyID, now)
	return info, nil
}

// touch writes last_used_at at most once per LastUsedEvery per key and
// instance, so that a busy key does not cost a write per request; while Run
// runs the write is Run's, within a second (lastUsedWriter).
func (s *Service) touch(ctx context.Context, keyID string, now time.Time) {
	if !s.keys.touch(keyID, now, s.opts.LastUsedEvery) {
		return
	}
	if s.lastUsed.note(keyID, now) {
		return
	}
	_, err := s.db.Exec(ctx, `
UPDATE api_keys SET last_used_at = $2
 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2::timestamptz - make_interval(secs => $3::float8))`,
		keyID, now, s.opts.LastUsedEvery.Seconds())
	if err != nil {
		s.log.WarnContext(ctx, "recording api key use failed", "key_id", keyID, "err", err)
	}
}

// TenantKey returns one of the tenant's keys; another tenant's key, an
// unknown or a malformed id is NotFound, so that a dashboard cannot probe
// other tenants' keys.
func (s *Service) TenantKey(ctx context.Context, tenantID, keyID string) (KeySummary, error) {
	if !ids.IsUUID(keyID) || !ids.IsUUID(tenantID) {
		return KeySummary{}, apperr.New(apperr.NotFound, "API key not found")
	}
	rows, err := s.db.Query(ctx, `
SELECT id::text, prefix, name, created_at, last_used_at, revoked_at FROM api_keys
 WHERE id = $1 AND tenant_id = $2`, keyID, tenantID)
	if err != nil {
		return KeySummary{}, fmt.Errorf("credentials: tenant key: %w", err)
	}
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[KeySummary])
	if errors.Is(err, pgx.ErrNoRows) {
		return KeySummary{}, apperr.New(apperr.NotFound, "API key not found")
	}
	if err != nil {
		return KeySummary{}, fmt.Errorf("credentials: tenant key: %w", err)
	}
	return k, nil
}

// KeyLive reports whether the key exists and is not revoked: a dashboard
// session lives only while the key that opened it does.
func (s *Service) KeyLive(ctx context.Context, keyID string) (bool, error) {
	if !ids.IsUUID(keyID) {
		return false, nil
	}
	var live bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1 AND revoked_at IS NULL)`, keyID).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("credentials: key live: %w", err)
	}
	return live, nil
}
