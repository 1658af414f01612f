package entitlements

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Overrides are admin-granted changes of one tenant's quota for one meter
// (extra units, or a different limit, and/or a different mode), optionally
// expiring. They apply through a new entitlement version: creating or
// deleting one bumps the version in the same transaction and publishes the
// snapshot after the commit; an expired one stops applying when
// RefreshExpiredOverrides (a periodic job) bumps the tenant again.

var overrideMeterRe = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

const maxReasonLen = 500

// OverrideInput is the body of POST /admin/v1/tenants/{id}/overrides.
type OverrideInput struct {
	Meter string `json:"meter"`
	Extra *int64 `json:"extra"` // added to the plan's limit
	Limit *int64 `json:"limit"` // replaces the plan's limit
	Mode  string `json:"mode"`  // "hard" or "soft"; "" keeps the plan's
	// Notify replaces the plan quota's thresholds of quota.threshold
	// webhooks for this tenant; empty keeps the plan's.
	Notify    []catalogue.NotifyInput `json:"notify"`
	Reason    string                  `json:"reason"`
	ExpiresAt *time.Time              `json:"expires_at"`
}

// Override is a stored override. Active is false once it has expired.
type Override struct {
	ID       string  `json:"id"`
	TenantID string  `json:"tenant_id"`
	Meter    string  `json:"meter"`
	Extra    *int64  `json:"extra"`
	Limit    *int64  `json:"limit"`
	Mode     *string `json:"mode"`
	// Notify is nil when the override keeps the plan's thresholds.
	Notify    []keyspace.QuotaThreshold `json:"notify"`
	Reason    string                    `json:"reason"`
	ExpiresAt *time.Time                `json:"expires_at"`
	CreatedAt time.Time                 `json:"created_at"`
	Active    bool                      `json:"active"`
}

// Validate checks every field against now, naming the bad ones.
func (in *OverrideInput) Validate(now time.Time) error {
	var v apperr.Validation
	if !overrideMeterRe.MatchString(in.Meter) {
		v.Add("meter", "must be a meter name [a-z0-9_.-]{1,64}")
	}
	if in.Extra != nil && in.Limit != nil {
		v.Add("limit", "give extra (added to the plan's limit) or limit (replacing it), not both")
	}
	if in.Extra != nil && *in.Extra < 0 {
		v.Add("extra", "must be at least 0")
	}
	if in.Limit != nil && *in.Limit < 0 {
		v.Add("limit", "must be at least 0")
	}
	if in.Mode != "" && in.Mode != string(limiter.ModeHard) && in.Mode != string(limiter.ModeSoft) {
		v.Add("mode", `must be "hard" or "soft"`)
	}
	catalogue.ValidateNotify(&v, "notify", in.Notify)
	if in.Extra == nil && in.Limit == nil && in.Mode == "" && len(in.Notify) == 0 {
		v.Add("extra", "give extra, limit, mode or notify: an override must change something")
	}
	if len([]rune(in.Reason)) > maxReasonLen {
		v.Add("reason", "must be at most %d characters", maxReasonLen)
	} else if strings.ContainsFunc(in.Reason, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }) {
		v.Add("reason", "must not contain control characters")
	}
	if in.ExpiresAt != nil && !in.ExpiresAt.After(now) {
		v.Add("expires_at", "must be in the future")
	}
	return v.Err()
}

const overrideCols = `id, tenant_id, meter, extra, quota_limit, mode, notify, reason, expires_at, created_at`

func scanOverride(now time.Time) pgx.RowToFunc[Override] {
	return func(row pgx.CollectableRow) (Override, error) {
		var o Override
		err := row.Scan(&o.ID, &o.TenantID, &o.Meter, &o.Extra, &o.Limit, &o.Mode, &o.Notify, &o.Reason, &o.ExpiresAt, &o.CreatedAt)
		o.Active = o.ExpiresAt == nil || o.ExpiresAt.After(now)
		return o, err
	}
}

// CreateOverride stores an override and applies it through a new
// entitlement version, published once committed.
func (s *Service) CreateOverride(ctx context.Context, tenantID string, in OverrideInput) (Override, error) {
	now := s.opts.Now()
	if err := in.Validate(now); err != nil {
		return Override{}, err
	}
	if !ids.IsUUID(tenantID) {
		return Override{}, tenantNotFound(tenantID)
	}
	var (
		o    Override
		snap limiter.Snapshot
	)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var mode *string
		if in.Mode != "" {
			mode = &in.Mode
		}
		rows, err := tx.Query(ctx, `
INSERT INTO quota_overrides (tenant_id, meter, extra, quota_limit, mode, reason, expires_at, notify)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+overrideCols,
			tenantID, in.Meter, in.Extra, in.Limit, mode, strings.TrimSpace(in.Reason), in.ExpiresAt, notifyJSON(catalogue.Thresholds(in.Notify)))
		if err != nil {
			return err
		}
		if o, err = pgx.CollectExactlyOneRow(rows, scanOverride(now)); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23503" {
				return tenantNotFound(tenantID)
			}
			return err
		}
		snap, err = s.BumpVersionTx(ctx, tx, tenantID, "override added: "+in.Meter)
		return err
	})
	if err != nil {
		return Override{}, fmt.Errorf("entitlements: create override: %w", err)
	}
	s.log.InfoContext(ctx, "quota override added", "tenant_id", tenantID, "override_id", o.ID, "meter", o.Meter)
	s.publishRetried(ctx, snap)
	return o, nil
}

// ListOverrides returns the tenant's overrides, newest first, expired ones
// included (Active false).
func (s *Service) ListOverrides(ctx context.Context, tenantID string) ([]Override, error) {
	if !ids.IsUUID(tenantID) {
		return nil, tenantNotFound(tenantID)
	}
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, tenantID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("entitlements: list overrides: %w", err)
	}
	if !exists {
		return nil, tenantNotFound(tenantID)
	}
	rows, err := s.db.Query(ctx, `SELECT `+overrideCols+` FROM quota_overrides WHERE tenant_id = $1 ORDER BY created_at DESC, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("entitlements: list overrides: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanOverride(s.opts.Now()))
	if err != nil {
		return nil, fmt.Errorf("entitlements: list overrides: %w", err)
	}
	if out == nil {
		out = []Override{}
	}
	return out, nil
}

// DeleteOverride removes one of the tenant's overrides and applies the
// change through a new entitlement version. Another tenant's override is
// not found.
func (s *Service) DeleteOverride(ctx context.Context, tenantID, overrideID string) error {
	if !ids.IsUUID(tenantID) || !ids.IsUUID(overrideID) {
		return apperr.New(apperr.NotFound, "no override %q", overrideID)
	}
	var snap limiter.Snapshot
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		meter, err := deleteOverrideTx(ctx, tx, tenantID, overrideID)
		if err != nil {
			return err
		}
		snap, err = s.BumpVersionTx(ctx, tx, tenantID, "override removed: "+meter)
		return err
	})
	if err != nil {
		return fmt.Errorf("entitlements: delete override: %w", err)
	}
	s.log.InfoContext(ctx, "quota override removed", "tenant_id", tenantID, "override_id", overrideID)
	s.publishRetried(ctx, snap)
	return nil
}

// deleteOverrideTx deletes the tenant's override inside tx and returns its
// meter (DeleteOverride and its preview).
func deleteOverrideTx(ctx context.Context, tx pgx.Tx, tenantID, overrideID string) (string, error) {
	if !ids.IsUUID(tenantID) || !ids.IsUUID(overrideID) {
		return "", apperr.New(apperr.NotFound, "no override %q", overrideID)
	}
	var meter string
	err := tx.QueryRow(ctx, `DELETE FROM quota_overrides WHERE id = $1 AND tenant_id = $2 RETURNING meter`, overrideID, tenantID).Scan(&meter)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", apperr.New(apperr.NotFound, "no override %q", overrideID)
	}
	return meter, err
}

// RefreshExpiredOverrides bumps every tenant with an override that has
// expired since the tenant's last entitlement version, so that the expiry
// takes effect; run periodically. It needs no state of its own: a tenant
// already bumped after the expiry is not found again.
func (s *Service) RefreshExpiredOverrides(ctx context.Context) (int, error) {
	rows, err := s.db.Query(ctx, `
SELECT DISTINCT o.tenant_id FROM quota_overrides o
 WHERE o.expires_at <= $1
   AND NOT EXISTS (SELECT 1 FROM entitlement_versions v
                    WHERE v.tenant_id = o.tenant_id AND v.created_at >= o.expires_at)`, s.opts.Now())
	if err != nil {
		return 0, fmt.Errorf("entitlements: expired overrides: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("entitlements: expired overrides: %w", err)
	}
	n := 0
	for _, id := range ids {
		if _, err := s.BumpAndPublish(ctx, id, "override expired"); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
