package entitlements

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// RepublishStats is what one republishing pass did.
type RepublishStats struct {
	Tenants int    // tenants looked at
	Written int    // snapshots written (missing or different in Redis)
	Last    string // last tenant id looked at; "" when the pass is done
}

// Republish keeps the snapshots of every tenant in Redis, from the tenant
// after `after` (by id) on, until budget has passed: an unchanged snapshot
// only gets its TTL back, a missing one is written. Snapshots expire in
// Redis after limitstore's SnapshotTTL (7 days) so that deleted tenants do
// not linger; without this pass, a tenant whose plan did not change for
// that long would become unknown to backends that read Redis without a
// loader. Stats.Last is where the next call goes on ("" when done).
func (s *Service) Republish(ctx context.Context, after string, budget time.Duration) (RepublishStats, error) {
	var st RepublishStats
	if s.store == nil {
		return st, nil
	}
	deadline := time.Now().Add(budget)
	for {
		rows, err := s.db.Query(ctx, `SELECT id::text, coalesce(external_id, '') FROM tenants WHERE id > $1::uuid ORDER BY id LIMIT 200`, firstUUID(after))
		if err != nil {
			return st, fmt.Errorf("entitlements: republish: %w", pgError(err))
		}
		page, err := pgx.CollectRows(rows, pgx.RowToStructByPos[republishRow])
		if err != nil {
			return st, fmt.Errorf("entitlements: republish: %w", pgError(err))
		}
		for _, row := range page {
			id := row.ID
			if row.ExternalID != "" {
				// The alias expires as the snapshot does; this keeps it too.
				if err := s.store.RefreshAlias(ctx, row.ExternalID, id); err != nil {
					return st, fmt.Errorf("entitlements: republish %s: %w", id, err)
				}
			}
			snap, err := s.SnapshotFromPostgres(ctx, id)
			if err != nil {
				return st, fmt.Errorf("entitlements: republish %s: %w", id, err)
			}
			written, err := s.store.Republish(ctx, snap)
			if err != nil {
				return st, fmt.Errorf("entitlements: republish %s: %w", id, err)
			}
			st.Tenants++
			if written {
				st.Written++
			}
			after = id
		}
		if len(page) < 200 {
			st.Last = ""
			return st, nil
		}
		st.Last = after
		if time.Now().After(deadline) {
			return st, nil
		}
	}
}

type republishRow struct {
	ID, ExternalID string
}

func firstUUID(after string) string {
	if after == "" {
		return "00000000-0000-0000-0000-000000000000"
	}
	return after
}

// RepublishArgs is one slice of a republishing pass, from the tenant after
// After on.
type RepublishArgs struct {
	After string `json:"after,omitempty"`
}

// Kind names the job in River's table.
func (RepublishArgs) Kind() string { return "entitlements_republish" }

// RepublishWorker runs RepublishArgs: about 40 s of work (River's job
// timeout is a minute), then the rest of the pass as a new job.
type RepublishWorker struct {
	river.WorkerDefaults[RepublishArgs]
	Service *Service
}

// Work republishes one slice and enqueues the next.
func (w *RepublishWorker) Work(ctx context.Context, job *river.Job[RepublishArgs]) error {
	st, err := w.Service.Republish(ctx, job.Args.After, 40*time.Second)
	if err != nil {
		return err
	}
	w.Service.log.InfoContext(ctx, "snapshots republished", "tenants", st.Tenants, "written", st.Written, "more", st.Last != "")
	if st.Last == "" {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("entitlements: republish: %w", err)
	}
	if _, err := client.Insert(ctx, RepublishArgs{After: st.Last}, nil); err != nil {
		return fmt.Errorf("entitlements: republish: enqueue the rest: %w", err)
	}
	return nil
}

// RepublishPeriodic starts a pass every 6 hours (and when the worker
// starts): a snapshot's 7-day TTL is refreshed many times before it could
// run out, even across days of failed passes.
func RepublishPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(6*time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return RepublishArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "entitlements_republish"})
}
