package web

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Expired deletes web's rows that are worthless once expired but would
// otherwise pile up forever: dashboard links and browser sessions. web owns
// both tables, so their pruning is here; the worker's retention job calls
// it (jobs.Retention), with a day of slack that keeps a just-expired link
// explainable ("expired", not "unknown").
type Expired struct{ db *pgxpool.Pool }

// NewExpired returns the pruner of web's tables on db.
func NewExpired(db *pgxpool.Pool) Expired { return Expired{db: db} }

// PruneLinks deletes dashboard links that expired before before.
func (e Expired) PruneLinks(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, e.db, `
DELETE FROM dashboard_links WHERE token_hash IN (SELECT token_hash FROM dashboard_links WHERE expires_at < $2 LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("web: prune dashboard links: %w", err)
	}
	return n, nil
}

// PruneSessions deletes browser sessions that expired before before.
func (e Expired) PruneSessions(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, e.db, `
DELETE FROM web_sessions WHERE id_hash IN (SELECT id_hash FROM web_sessions WHERE expires_at < $2 LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("web: prune sessions: %w", err)
	}
	return n, nil
}
