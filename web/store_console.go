package web

// The console's read model: plans, the tenant list, a tenant's overrides
// and entitlement versions.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// PlanRow is a plan with its quotas.
type PlanRow struct {
	Key           string
	Name          string
	StripePriceID string
	// StripePriceIDs are every price of the plan, the self-serve default
	// first; StripeProductID maps every price of a product.
	StripePriceIDs  []string
	StripeProductID string
	RatePerSecond   *float64
	RateBurst       *int64
	Concurrency     *int64
	Features        []string
	Quotas          []QuotaRow
	Tenants         int64 // tenants on the plan
	UpdatedAt       time.Time
	QuotaWindow     string // "month" or "billing_period"
	Public          bool   // offered to tenants on their dashboard
	// Windows are the plan's window limits, in its order.
	Windows []entitlements.PlanWindow
}

// QuotaRow is one meter's monthly quota of a plan.
type QuotaRow struct {
	Meter   string
	Limit   int64
	Mode    string
	PerSeat bool // Limit × the plan item's quantity
}

func (s *store) plans(ctx context.Context) ([]PlanRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT p.key, p.name, COALESCE(p.stripe_price_id, ''),
		       COALESCE((SELECT array_agg(c.stripe_price_id ORDER BY c.position) FROM catalogue_prices c WHERE c.plan_key = p.key), '{}'),
		       COALESCE((SELECT c.stripe_product_id FROM catalogue_products c WHERE c.plan_key = p.key), ''),
		       p.rate_per_second, p.rate_burst, p.concurrency,
		       p.features, p.updated_at, p.quota_window, p.public,
		       (SELECT count(*) FROM tenants t WHERE t.plan_key = p.key),
		       COALESCE((SELECT json_agg(json_build_object('meter', q.meter, 'limit', q.quota_limit, 'mode', q.mode, 'per_seat', q.per_seat) ORDER BY q.meter)
		                 FROM plan_quotas q WHERE q.plan_key = p.key), '[]'),
		       p.windows
		FROM plans p ORDER BY p.key`)
	if err != nil {
		return nil, fmt.Errorf("web: plans: %w", err)
	}
	var out []PlanRow
	var p PlanRow
	var quotas, windows []byte
	_, err = pgx.ForEachRow(rows, []any{&p.Key, &p.Name, &p.StripePriceID, &p.StripePriceIDs, &p.StripeProductID, &p.RatePerSecond, &p.RateBurst, &p.Concurrency,
		&p.Features, &p.UpdatedAt, &p.QuotaWindow, &p.Public, &p.Tenants, &quotas, &windows}, func() error {
		p.Windows = nil
		if len(windows) > 0 {
			if err := json.Unmarshal(windows, &p.Windows); err != nil {
				return err
			}
		}
		var qs []struct {
			Meter   string `json:"meter"`
			Limit   int64  `json:"limit"`
			Mode    string `json:"mode"`
			PerSeat bool   `json:"per_seat"`
		}
		if err := json.Unmarshal(quotas, &qs); err != nil {
			return err
		}
		p.Quotas = nil
		for _, q := range qs {
			p.Quotas = append(p.Quotas, QuotaRow{Meter: q.Meter, Limit: q.Limit, Mode: q.Mode, PerSeat: q.PerSeat})
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: plans: %w", err)
	}
	return out, nil
}

func (s *store) plan(ctx context.Context, key string) (PlanRow, error) {
	ps, err := s.plans(ctx)
	if err != nil {
		return PlanRow{}, err
	}
	for _, p := range ps {
		if p.Key == key {
			return p, nil
		}
	}
	return PlanRow{}, apperr.New(apperr.NotFound, "plan %q not found", key)
}

// TenantListRow is one line of the console's tenant list.
type TenantListRow struct {
	ID           string
	Name         string
	PlanKey      string
	SubStatus    string
	Requests     int64 // durable usage of the "requests" meter in the open period
	RequestLimit *int64
	CreatedAt    time.Time
}

// tenantPage lists tenants whose name or id or Stripe customer matches q,
// newest first, page by page (1-based).
func (s *store) tenantPage(ctx context.Context, q string, page, size int) ([]TenantListRow, int64, error) {
	like := "%"
	if q = strings.TrimSpace(q); q != "" {
		like = "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(strings.ToLower(q)) + "%"
	}
	var total int64
	if err := s.db.QueryRow(ctx, `
		SELECT count(*) FROM tenants
		WHERE lower(name) LIKE $1 OR id::text = $2 OR stripe_customer_id = $2 OR external_id = $2`, like, q).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("web: count tenants: %w", err)
	}
	rows, err := s.db.Query(ctx, `
		SELECT t.id, t.name, t.plan_key,
		       COALESCE((SELECT s.status FROM (`+entitlements.CurrentSubscriptionOf("t.id")+`) s), ''),
		       COALESCE((SELECT used FROM usage_periods u WHERE u.tenant_id = t.id AND u.meter = 'requests'
		                 AND u.period_start <= now() AND u.period_end > now() ORDER BY period_start DESC LIMIT 1), 0),
		       (SELECT quota_limit FROM plan_quotas q WHERE q.plan_key = t.plan_key AND q.meter = 'requests'),
		       t.created_at
		FROM tenants t
		WHERE lower(t.name) LIKE $1 OR t.id::text = $2 OR t.stripe_customer_id = $2 OR t.external_id = $2
		ORDER BY t.created_at DESC, t.id DESC
		LIMIT $3 OFFSET $4`, like, q, size, (page-1)*size)
	if err != nil {
		return nil, 0, fmt.Errorf("web: tenants: %w", err)
	}
	var out []TenantListRow
	var r TenantListRow
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Name, &r.PlanKey, &r.SubStatus, &r.Requests, &r.RequestLimit, &r.CreatedAt}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("web: tenants: %w", err)
	}
	return out, total, nil
}

// OverrideRow is an admin-granted quota change.
type OverrideRow struct {
	ID        string
	Meter     string
	Extra     *int64
	Limit     *int64
	Mode      *string
	Reason    string
	ExpiresAt *time.Time
	CreatedAt time.Time
}

func (s *store) overrides(ctx context.Context, tenantID string) ([]OverrideRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT id, meter, extra, quota_limit, mode, reason, expires_at, created_at FROM quota_overrides
		WHERE tenant_id = $1 ORDER BY created_at DESC LIMIT 100`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: overrides: %w", err)
	}
	var out []OverrideRow
	var o OverrideRow
	_, err = pgx.ForEachRow(rows, []any{&o.ID, &o.Meter, &o.Extra, &o.Limit, &o.Mode, &o.Reason, &o.ExpiresAt, &o.CreatedAt}, func() error {
		out = append(out, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: overrides: %w", err)
	}
	return out, nil
}

// VersionRow is one entitlement version.
type VersionRow struct {
	Version   int64
	Reason    string
	CreatedAt time.Time
}

func (s *store) versions(ctx context.Context, tenantID string, limit int) ([]VersionRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT version, reason, created_at FROM entitlement_versions
		WHERE tenant_id = $1 ORDER BY version DESC LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("web: versions: %w", err)
	}
	var out []VersionRow
	var v VersionRow
	_, err = pgx.ForEachRow(rows, []any{&v.Version, &v.Reason, &v.CreatedAt}, func() error {
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: versions: %w", err)
	}
	return out, nil
}

// keyWithSessions is one of the tenant's keys and the number of dashboard
// sessions opened with it that are still live: revoking the key ends them
// (a session lives only while the key that opened it does).
func (s *store) keyWithSessions(ctx context.Context, keyID, tenantID string) (KeyRow, int64, error) {
	if !ids.IsUUID(keyID) || !ids.IsUUID(tenantID) {
		return KeyRow{}, 0, apperr.New(apperr.NotFound, "API key not found")
	}
	var k KeyRow
	var sessions int64
	err := s.db.QueryRow(ctx, `
		SELECT k.id, k.prefix, k.name, k.created_at, k.last_used_at, k.revoked_at,
		       (SELECT count(*) FROM web_sessions ws WHERE ws.api_key_id = k.id AND ws.expires_at > now())
		FROM api_keys k WHERE k.id = $1 AND k.tenant_id = $2`, keyID, tenantID).Scan(
		&k.ID, &k.Prefix, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt, &sessions)
	if err != nil {
		return KeyRow{}, 0, fmt.Errorf("web: key: %w", notFound(err, "API key"))
	}
	return k, sessions, nil
}

// tenantNames names tenants by id, the first limit of them by name.
func (s *store) tenantNames(ctx context.Context, ids []string, limit int) ([]tenantLink, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text, name FROM tenants WHERE id = ANY($1::uuid[]) ORDER BY lower(name), id LIMIT $2`, ids, limit)
	if err != nil {
		return nil, fmt.Errorf("web: tenant names: %w", err)
	}
	var out []tenantLink
	var t tenantLink
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.Name}, func() error {
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: tenant names: %w", err)
	}
	return out, nil
}

// tenantByCustomer is the tenant linked to a Stripe customer.
func (s *store) tenantByCustomer(ctx context.Context, customer string) (tenantLink, error) {
	var t tenantLink
	err := s.db.QueryRow(ctx, `SELECT id::text, name FROM tenants WHERE stripe_customer_id = $1`, customer).Scan(&t.ID, &t.Name)
	if err != nil {
		return tenantLink{}, fmt.Errorf("web: tenant by customer: %w", notFound(err, "tenant"))
	}
	return t, nil
}
