// Package idempotency keeps the first answer to an Idempotency-Key
// (draft-ietf-httpapi-idempotency-key-header) so that a retried admin POST
// gets that answer again instead of acting twice. It owns the table
// idempotency_keys.
//
// The rules: a key is scoped to its caller (an admin actor); the same key
// with the same request (method, path and body) replays the stored status
// and body; the same key with another request is a mistake (ErrMismatch);
// a key whose first request is still running is ErrInProgress. Answers of
// 5xx are not kept, so a retry after a failure runs again. Keys last TTL.
package idempotency

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TTL is how long a key's answer is kept (Stripe keeps 24 hours too).
const TTL = 24 * time.Hour

// Errors of Begin.
var (
	ErrMismatch   = errors.New("idempotency: the key was used for another request")
	ErrInProgress = errors.New("idempotency: the key's first request is still in progress")
)

// Answer is a stored response.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
}

// Store keeps keys in Postgres.
type Store struct{ db *pgxpool.Pool }

// New returns a Store on db.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// Hash is the fingerprint of a request that a key is bound to.
func Hash(method, path string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", method, path)
	h.Write(body)
	return h.Sum(nil)
}

// Begin claims key for the request hash. It returns the stored answer when
// the key was answered for the same request (replay), nil when the caller
// owns the key now and must Finish or Abandon it, or ErrMismatch /
// ErrInProgress.
func (s *Store) Begin(ctx context.Context, scope, key string, hash []byte) (*Answer, error) {
	// An expired key is free again.
	if _, err := s.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND created_at < now() - $3::interval`,
		scope, key, fmt.Sprintf("%d seconds", int(TTL.Seconds()))); err != nil {
		return nil, fmt.Errorf("idempotency: expire: %w", err)
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO idempotency_keys (scope, key, request_hash) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, scope, key, hash)
	if err != nil {
		return nil, fmt.Errorf("idempotency: claim: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	var (
		stored []byte
		a      Answer
	)
	err = s.db.QueryRow(ctx, `SELECT request_hash, status, content_type, coalesce(body, '') FROM idempotency_keys WHERE scope = $1 AND key = $2`, scope, key).
		Scan(&stored, &a.Status, &a.ContentType, &a.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		// Abandoned between the two statements: claim it again.
		return s.Begin(ctx, scope, key, hash)
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: read: %w", err)
	}
	switch {
	case string(stored) != string(hash):
		return nil, ErrMismatch
	case a.Status == 0:
		return nil, ErrInProgress
	}
	return &a, nil
}

// Finish stores the answer of a claimed key.
func (s *Store) Finish(ctx context.Context, scope, key string, a Answer) error {
	_, err := s.db.Exec(ctx, `UPDATE idempotency_keys SET status = $3, content_type = $4, body = $5 WHERE scope = $1 AND key = $2`,
		scope, key, a.Status, a.ContentType, a.Body)
	if err != nil {
		return fmt.Errorf("idempotency: finish: %w", err)
	}
	return nil
}

// Abandon frees a claimed key (the request failed with a 5xx): a retry runs.
func (s *Store) Abandon(ctx context.Context, scope, key string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE scope = $1 AND key = $2 AND status = 0`, scope, key); err != nil {
		return fmt.Errorf("idempotency: abandon: %w", err)
	}
	return nil
}

// Prune deletes keys claimed before before; the worker's retention job
// calls it with now - TTL (Begin ignores expired keys anyway).
func (s *Store) Prune(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("idempotency: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}
