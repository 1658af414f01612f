package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what both a pool and a transaction offer: code that reads or
// writes takes one, so the caller decides whether it runs inside a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// XactLock takes the transaction-scoped advisory lock named key (hashed
// with hashtextextended, so any text names a lock) and holds it until tx
// commits or rolls back. Every caller that serialises on the same thing
// must use the same key; keep the key's spelling in one function of the
// owning package.
func XactLock(ctx context.Context, tx pgx.Tx, key string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, key); err != nil {
		return fmt.Errorf("postgres: advisory lock %q: %w", key, err)
	}
	return nil
}
