package entitlements

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/limiter"
)

// A plan's versions are the catalogue's; which version a tenant holds
// (tenants.plan_version, set by an edit with "apply": "new") is the
// tenant's, so moving the tenants of an old version to the current one is
// done here.

// MigrateInput is the body of POST /admin/v1/plans/{key}/migrate.
type MigrateInput struct {
	FromVersion *int64 `json:"from_version"`
	DryRun      bool   `json:"dry_run"`
}

// Migration is the answer: the tenants moved (or, in a dry run, that
// would be) with what changes for each.
type Migration struct {
	DryRun  bool             `json:"dry_run"`
	Tenants []MigratedTenant `json:"tenants"`
}

// MigratedTenant is one tenant of a migration.
type MigratedTenant struct {
	ID          string        `json:"id"`
	Name        string        `json:"name"`
	FromVersion int64         `json:"from_version"`
	ToVersion   int64         `json:"to_version"`
	Changes     []LimitChange `json:"changes"`
}

// LimitChange is one limit that differs between two versions; nil is
// unlimited (or, for a feature, absent).
type LimitChange struct {
	Limit  string `json:"limit"`
	Before *int64 `json:"before"`
	After  *int64 `json:"after"`
}

// MigratePlan moves the tenants grandfathered on version from of the plan
// to its current version, each with a new entitlement version; a dry run
// answers the same and changes nothing.
func (s *Service) MigratePlan(ctx context.Context, key string, in MigrateInput) (Migration, error) {
	if in.FromVersion == nil {
		return Migration{}, apperr.Invalidf("from_version", "is required")
	}
	from := *in.FromVersion
	out := Migration{DryRun: in.DryRun, Tenants: []MigratedTenant{}}
	var snaps []limiter.Snapshot
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		cur, err := catalogue.LockPlan(ctx, tx, key)
		if err != nil {
			return err
		}
		if from < 1 || from >= cur.Version {
			return apperr.Invalidf("from_version", "must be an older version of %s than its current %d", key, cur.Version)
		}
		old, err := catalogue.PlanAt(ctx, tx, cur, from)
		if err != nil {
			return err
		}
		changes := limitChanges(old, cur)
		rows, err := tx.Query(ctx, `SELECT id::text, name FROM tenants WHERE plan_key = $1 AND plan_version = $2 ORDER BY name, id FOR UPDATE`, key, from)
		if err != nil {
			return fmt.Errorf("tenants of version: %w", err)
		}
		var t MigratedTenant
		if _, err := pgx.ForEachRow(rows, []any{&t.ID, &t.Name}, func() error {
			out.Tenants = append(out.Tenants, MigratedTenant{ID: t.ID, Name: t.Name, FromVersion: from, ToVersion: cur.Version, Changes: changes})
			return nil
		}); err != nil {
			return fmt.Errorf("tenants of version: %w", err)
		}
		if in.DryRun {
			return nil
		}
		for _, t := range out.Tenants {
			if _, err := tx.Exec(ctx, `UPDATE tenants SET plan_version = NULL WHERE id = $1`, t.ID); err != nil {
				return fmt.Errorf("migrate tenant: %w", err)
			}
			snap, err := s.BumpVersionTx(ctx, tx, t.ID, fmt.Sprintf("plan %s: migrated from version %d to %d", key, from, cur.Version))
			if err != nil {
				return err
			}
			snaps = append(snaps, snap)
		}
		return nil
	})
	if err != nil {
		return Migration{}, fmt.Errorf("catalogue: migrate plan: %w", err)
	}
	s.log.InfoContext(ctx, "plan version migrated", "plan", key, "from_version", from, "tenants", len(out.Tenants), "dry_run", in.DryRun)
	s.publishAll(ctx, snaps)
	return out, nil
}

// limitChanges lists what differs between two versions of a plan: the
// rate ("rate.per_second" rounded down, "rate.burst"), "concurrency", each
// quota ("quota:<meter>") and each feature ("feature:<name>", 1 = has it).
func limitChanges(before, after catalogue.Plan) []LimitChange {
	out := []LimitChange{}
	add := func(name string, b, a *int64) {
		if (b == nil) != (a == nil) || (b != nil && *b != *a) {
			out = append(out, LimitChange{Limit: name, Before: b, After: a})
		}
	}
	rate := func(r *limiter.Rate) (*int64, *int64) {
		if r == nil {
			return nil, nil
		}
		ps, b := int64(r.PerSecond), r.Burst
		return &ps, &b
	}
	bp, bb := rate(before.Rate)
	ap, ab := rate(after.Rate)
	add("rate.per_second", bp, ap)
	add("rate.burst", bb, ab)
	add("concurrency", before.Concurrency, after.Concurrency)
	meters := map[string]bool{}
	for m := range before.Quotas {
		meters[m] = true
	}
	for m := range after.Quotas {
		meters[m] = true
	}
	ms := make([]string, 0, len(meters))
	for m := range meters {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	for _, m := range ms {
		var b, a *int64
		if q, ok := before.Quotas[m]; ok {
			l := q.Limit
			b = &l
		}
		if q, ok := after.Quotas[m]; ok {
			l := q.Limit
			a = &l
		}
		add(QuotaPolicy(m), b, a)
	}
	has := func(fs []string, f string) *int64 {
		for _, x := range fs {
			if x == f {
				one := int64(1)
				return &one
			}
		}
		return nil
	}
	for _, f := range uniqueSorted(append(append([]string{}, before.Features...), after.Features...)) {
		add("feature:"+f, has(before.Features, f), has(after.Features, f))
	}
	return out
}
