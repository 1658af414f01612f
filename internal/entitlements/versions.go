package entitlements

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
)

// Plan versions (issue 25). Every edit of a plan is version n+1 (the plan
// row is always the current one). An edit with "apply": "all" (the
// default) reaches every tenant that follows the plan; with "apply":
// "new" the tenants on it keep version n (tenants.plan_version) and only
// new assignments get n+1. MigratePlan moves the tenants of an old version
// to the current one. A price may be pinned to a version
// (price_versions), so that a legacy price keeps its limits whatever the
// tenant's own version.

// What PATCH /admin/v1/plans/{key} applies an edit to.
const (
	ApplyAll = "all" // every tenant following the plan (today's behaviour)
	ApplyNew = "new" // new assignments only; tenants on the plan keep their version
)

// saveVersion keeps the plan as it is now as its version's record.
func saveVersion(ctx context.Context, q postgres.Querier, p Plan) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode plan version: %w", err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO plan_versions (plan_key, version, plan) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		p.Key, p.Version, raw); err != nil {
		return fmt.Errorf("save plan version: %w", err)
	}
	return nil
}

// planVersion is the plan as it was at version v (the current plan when v
// is its version or there is no record of v).
func planVersion(ctx context.Context, q postgres.Querier, cur Plan, v int64) (Plan, error) {
	if v <= 0 || v == cur.Version {
		return cur, nil
	}
	var raw []byte
	err := q.QueryRow(ctx, `SELECT plan FROM plan_versions WHERE plan_key = $1 AND version = $2`, cur.Key, v).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return cur, nil
	}
	if err != nil {
		return Plan{}, fmt.Errorf("read plan version: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(raw, &p); err != nil {
		return Plan{}, fmt.Errorf("decode plan version: %w", err)
	}
	// Name, prices and visibility are the plan's now; the limits are the
	// version's.
	out := cur
	out.Version, out.Rate, out.Concurrency, out.Quotas, out.Features, out.QuotaWindow = v, p.Rate, p.Concurrency, p.Quotas, p.Features, p.QuotaWindow
	if out.Quotas == nil {
		out.Quotas = map[string]Quota{}
	}
	if out.Features == nil {
		out.Features = []string{}
	}
	return out, nil
}

// grandfather pins every tenant following the plan to its version before
// an "apply": "new" edit.
func grandfather(ctx context.Context, tx pgx.Tx, before Plan) error {
	if err := saveVersion(ctx, tx, before); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE tenants SET plan_version = $2 WHERE plan_key = $1 AND plan_version IS NULL`, before.Key, before.Version); err != nil {
		return fmt.Errorf("grandfather tenants: %w", err)
	}
	return nil
}

// savePriceVersions pins prices of the plan to versions.
func savePriceVersions(ctx context.Context, tx pgx.Tx, key string, pins map[string]int64, current int64) error {
	var v apperr.Validation
	for _, price := range sortedKeys(pins) {
		if n := pins[price]; n < 1 || n > current {
			v.Add("price_versions."+price, "must be a version of the plan, 1 to %d", current)
		}
	}
	if err := v.Err(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE catalogue_prices SET plan_version = NULL WHERE plan_key = $1`, key); err != nil {
		return fmt.Errorf("save price versions: %w", err)
	}
	for _, price := range sortedKeys(pins) {
		tag, err := tx.Exec(ctx, `UPDATE catalogue_prices SET plan_version = $3 WHERE plan_key = $1 AND stripe_price_id = $2`, key, price, pins[price])
		if err != nil {
			return fmt.Errorf("save price versions: %w", err)
		}
		if tag.RowsAffected() == 0 {
			v.Add("price_versions."+price, "%s is not one of the plan's stripe_price_ids", price)
		}
	}
	return v.Err()
}

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
		cur, err := getPlan(ctx, tx, key, true)
		if err != nil {
			return err
		}
		if from < 1 || from >= cur.Version {
			return apperr.Invalidf("from_version", "must be an older version of %s than its current %d", key, cur.Version)
		}
		old, err := planVersion(ctx, tx, cur, from)
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
		return Migration{}, fmt.Errorf("entitlements: migrate plan: %w", err)
	}
	s.log.InfoContext(ctx, "plan version migrated", "plan", key, "from_version", from, "tenants", len(out.Tenants), "dry_run", in.DryRun)
	s.publishAll(ctx, snaps)
	return out, nil
}

// limitChanges lists what differs between two versions of a plan: the
// rate ("rate.per_second" rounded down, "rate.burst"), "concurrency", each
// quota ("quota:<meter>") and each feature ("feature:<name>", 1 = has it).
func limitChanges(before, after Plan) []LimitChange {
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
