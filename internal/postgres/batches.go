package postgres

import (
	"context"
	"fmt"
)

// RetentionBatch is how many rows one retention DELETE removes: small
// enough that no statement holds locks (or bloats WAL) for long on a big
// table, large enough that a backlog goes in a few passes.
const RetentionBatch = 5000

// DeleteInBatches runs del, a DELETE that removes at most $1 rows (its
// LIMIT; args follow as $2…), until a pass removes fewer than
// RetentionBatch, and returns how many rows went. Each pass is its own
// statement, so a cancelled ctx keeps what was deleted so far.
func DeleteInBatches(ctx context.Context, db Querier, del string, args ...any) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, del, append([]any{RetentionBatch}, args...)...)
		if err != nil {
			return total, fmt.Errorf("postgres: delete in batches: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < RetentionBatch {
			return total, nil
		}
	}
}
