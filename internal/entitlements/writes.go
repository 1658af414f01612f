package entitlements

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
)

// Writes are the changes another package (billing) makes to tenants inside
// a transaction that WriteAndPublish owns. The tenants table is written only here,
// and every tenant a write changed, or that the caller marks Changed (its
// subscription moved), gets a new entitlement version in the same
// transaction and is published after the commit: "every change bumps and
// publishes" is kept by this package, not by each caller.
type Writes struct {
	s       *Service
	tx      pgx.Tx
	changed []string
	reason  string
}

// Tx is the transaction, for the caller's own tables.
func (w *Writes) Tx() pgx.Tx { return w.tx }

// Reason sets the entitlement_versions reason of the bumps.
func (w *Writes) Reason(r string) { w.reason = r }

// Changed marks a tenant whose entitlements inputs the caller changed (its
// subscription, items): it is bumped and published.
func (w *Writes) Changed(tenantID string) {
	if tenantID != "" && !slices.Contains(w.changed, tenantID) {
		w.changed = append(w.changed, tenantID)
	}
}

// WriteAndPublish runs fn (another package's writes to tenants, through
// Writes) in a transaction, bumps every changed tenant inside it
// (BumpVersionTx), commits, then publishes the new snapshots. Committed means done: a
// publish that still fails after retries is logged, and the limiter's
// loader rebuilds the snapshot from Postgres once the cached one is
// reloaded. It returns the published snapshots.
func (s *Service) WriteAndPublish(ctx context.Context, fn func(ctx context.Context, w *Writes) error) ([]limiter.Snapshot, error) {
	var snaps []limiter.Snapshot
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		w := &Writes{s: s, tx: tx}
		snaps = nil
		if err := fn(ctx, w); err != nil {
			return err
		}
		reason := w.reason
		if reason == "" {
			reason = "updated"
		}
		for _, t := range w.changed {
			snap, err := s.BumpVersionTx(ctx, tx, t, reason)
			if err != nil {
				return err
			}
			snaps = append(snaps, snap)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, snap := range snaps {
		s.publishRetried(ctx, snap)
	}
	return snaps, nil
}

// publishRetried publishes a committed snapshot, retrying a few times. It
// is the one policy for every change this package commits: committed means
// done (the caller answers 2xx), because answering an error after the
// commit makes a client retry a change that was made (a second override, a
// delete that then answers 404). What still fails is logged, and the
// limiter's loader rebuilds the snapshot from Postgres once its cached one
// is reloaded.
func (s *Service) publishRetried(ctx context.Context, snap limiter.Snapshot) {
	err := limitstore.Retry(ctx, s.opts.RedisTimeout, func(ctx context.Context) error { return s.PublishToRedis(ctx, snap) })
	if err != nil {
		s.log.WarnContext(ctx, "entitlement snapshot not published; the limiter reloads it from Postgres",
			"tenant_id", snap.TenantID, "version", snap.Version, "err", err)
	}
}

// TenantByCustomer is the tenant linked to a Stripe customer, or "".
func (w *Writes) TenantByCustomer(ctx context.Context, customer string) (string, error) {
	if customer == "" {
		return "", nil
	}
	var id string
	err := w.tx.QueryRow(ctx, `SELECT id FROM tenants WHERE stripe_customer_id = $1`, customer).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("entitlements: tenant by customer: %w", err)
	}
	return id, nil
}

// LockTenant locks a tenant's row and returns its linked customer ("" when
// none); ok is false when there is no such tenant.
func (w *Writes) LockTenant(ctx context.Context, tenantID string) (customer string, ok bool, err error) {
	if !ids.IsUUID(tenantID) {
		return "", false, nil
	}
	var c *string
	err = w.tx.QueryRow(ctx, `SELECT stripe_customer_id FROM tenants WHERE id = $1 FOR UPDATE`, tenantID).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("entitlements: lock tenant: %w", err)
	}
	if c != nil {
		customer = *c
	}
	return customer, true, nil
}

// LinkCustomer links a Stripe customer to a tenant, replacing the one it
// had (the caller decides whether replacing is right). A customer linked to
// another tenant is not moved: linked is false then.
func (w *Writes) LinkCustomer(ctx context.Context, tenantID, customer string) (linked bool, err error) {
	var other string
	err = w.tx.QueryRow(ctx, `SELECT id FROM tenants WHERE stripe_customer_id = $1`, customer).Scan(&other)
	switch {
	case err == nil && other == tenantID:
		return true, nil
	case err == nil:
		return false, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("entitlements: tenant by customer: %w", err)
	}
	// A new customer brings its own Stripe features (its summary follows).
	tag, err := w.tx.Exec(ctx, `UPDATE tenants SET stripe_customer_id = $2, updated_at = now(),
			stripe_features = CASE WHEN stripe_customer_id IS NULL THEN stripe_features ELSE '{}' END
		WHERE id = $1`, tenantID, customer)
	if err != nil {
		return false, fmt.Errorf("entitlements: link customer: %w", pgError(err))
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	w.Changed(tenantID)
	return true, nil
}

// UnlinkCustomer removes a customer's link (and its Stripe features) and
// returns the tenant it was linked to, or "".
func (w *Writes) UnlinkCustomer(ctx context.Context, customer string) (string, error) {
	var tenant string
	err := w.tx.QueryRow(ctx, `UPDATE tenants SET stripe_customer_id = NULL, stripe_features = '{}', updated_at = now()
		WHERE stripe_customer_id = $1 RETURNING id`, customer).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("entitlements: unlink customer: %w", err)
	}
	w.Changed(tenant)
	return tenant, nil
}

// SetPlan puts a tenant on a plan; changed is false when it was on it.
func (w *Writes) SetPlan(ctx context.Context, tenantID, planKey string) (changed bool, err error) {
	tag, err := w.tx.Exec(ctx, `UPDATE tenants SET plan_key = $2, plan_version = NULL, updated_at = now() WHERE id = $1 AND plan_key <> $2`, tenantID, planKey)
	if err != nil {
		return false, fmt.Errorf("entitlements: set plan: %w", pgError(err))
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	w.Changed(tenantID)
	return true, nil
}

// Plan is the tenant's stored plan key.
func (w *Writes) Plan(ctx context.Context, tenantID string) (string, error) {
	var p string
	if err := w.tx.QueryRow(ctx, `SELECT plan_key FROM tenants WHERE id = $1`, tenantID).Scan(&p); err != nil {
		return "", fmt.Errorf("entitlements: load plan: %w", err)
	}
	return p, nil
}

// SetStripeFeatures replaces the tenant's Stripe Entitlements lookup keys.
func (w *Writes) SetStripeFeatures(ctx context.Context, tenantID string, keys []string) (changed bool, err error) {
	keys = uniqueSorted(keys)
	if keys == nil {
		keys = []string{}
	}
	tag, err := w.tx.Exec(ctx, `UPDATE tenants SET stripe_features = $2, updated_at = now()
		WHERE id = $1 AND stripe_features IS DISTINCT FROM $2`, tenantID, keys)
	if err != nil {
		return false, fmt.Errorf("entitlements: set features: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	w.Changed(tenantID)
	return true, nil
}
