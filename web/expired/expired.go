// Package expired prunes web's rows that are worthless once expired but
// would otherwise pile up forever: dashboard links and browser sessions.
// It is part of web, which owns both tables, and apart from it so that the
// worker's retention job can prune them without importing the console
// (echo, every page).
package expired

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/postgres"
)

// Pruner deletes expired links and sessions; the worker's retention job
// calls it (jobs.Retention), with a day of slack that keeps a just-expired
// link explainable ("expired", not "unknown").
type Pruner struct{ db *pgxpool.Pool }

// New returns the pruner of web's tables on db.
func New(db *pgxpool.Pool) Pruner { return Pruner{db: db} }

// PruneLinks deletes dashboard links that expired before before.
func (e Pruner) PruneLinks(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, e.db, `
DELETE FROM dashboard_links WHERE token_hash IN (SELECT token_hash FROM dashboard_links WHERE expires_at < $2 LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("web: prune dashboard links: %w", err)
	}
	return n, nil
}

// PruneSessions deletes browser sessions that expired before before.
func (e Pruner) PruneSessions(ctx context.Context, before time.Time) (int64, error) {
	n, err := postgres.DeleteInBatches(ctx, e.db, `
DELETE FROM web_sessions WHERE id_hash IN (SELECT id_hash FROM web_sessions WHERE expires_at < $2 LIMIT $1)`, before)
	if err != nil {
		return n, fmt.Errorf("web: prune sessions: %w", err)
	}
	return n, nil
}
