package web

// The console's read model: plans, the tenant list, a tenant's overrides
// and entitlement versions.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
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
	Windows []catalogue.PlanWindow
}

// QuotaRow is one meter's monthly quota of a plan.
type QuotaRow struct {
	Meter   string
	Limit   int64
	Mode    string
	PerSeat bool // Limit × the plan item's quantity
	// Notify are the quota.threshold webhook thresholds set on the quota;
	// empty = the defaults (80% and 100%).
	Notify []keyspace.QuotaThreshold
}

func (s *store) plans(ctx context.Context) ([]PlanRow, error) {
	plans, err := s.cat.ListPlans(ctx)
	if err != nil {
		return nil, fmt.Errorf("web: plans: %w", err)
	}
	counts, err := s.ents.PlanTenantCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("web: plans: %w", err)
	}
	out := make([]PlanRow, 0, len(plans))
	for _, p := range plans {
		r := PlanRow{Key: p.Key, Name: p.Name, StripePriceID: p.StripePriceID, StripePriceIDs: p.StripePriceIDs,
			StripeProductID: p.StripeProductID, Concurrency: p.Concurrency, Features: p.Features, Tenants: counts[p.Key],
			UpdatedAt: p.UpdatedAt, QuotaWindow: p.QuotaWindow, Public: p.Public, Windows: p.Windows}
		if p.Rate != nil {
			r.RatePerSecond, r.RateBurst = &p.Rate.PerSecond, &p.Rate.Burst
		}
		meters := make([]string, 0, len(p.Quotas))
		for m := range p.Quotas {
			meters = append(meters, m)
		}
		sort.Strings(meters)
		for _, m := range meters {
			q := p.Quotas[m]
			r.Quotas = append(r.Quotas, QuotaRow{Meter: m, Limit: q.Limit, Mode: q.Mode, PerSeat: q.PerSeat, Notify: q.Notify})
		}
		out = append(out, r)
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
// newest first, page by page (1-based). Requests and RequestLimit are left
// to the caller, who reads them as the tenant's page does (GET /v1/usage's
// function: overrides and unflushed usage count).
func (s *store) tenantPage(ctx context.Context, q string, page, size int) ([]TenantListRow, int64, error) {
	ts, total, err := s.ents.SearchTenants(ctx, q, page, size)
	if err != nil {
		return nil, 0, fmt.Errorf("web: tenants: %w", err)
	}
	out := make([]TenantListRow, 0, len(ts))
	for _, t := range ts {
		out = append(out, TenantListRow{ID: t.ID, Name: t.Name, PlanKey: t.Plan, SubStatus: t.SubStatus, CreatedAt: t.CreatedAt})
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

// overrides are the tenant's last 100 overrides, newest first.
func (s *store) overrides(ctx context.Context, tenantID string) ([]OverrideRow, error) {
	ovs, err := s.ents.ListOverrides(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: overrides: %w", err)
	}
	out := make([]OverrideRow, 0, min(len(ovs), 100))
	for _, o := range ovs[:min(len(ovs), 100)] {
		out = append(out, OverrideRow{ID: o.ID, Meter: o.Meter, Extra: o.Extra, Limit: o.Limit, Mode: o.Mode, Reason: o.Reason,
			ExpiresAt: o.ExpiresAt, CreatedAt: o.CreatedAt})
	}
	return out, nil
}

// VersionRow is one entitlement version.
type VersionRow = entitlements.Version

func (s *store) versions(ctx context.Context, tenantID string, limit int) ([]VersionRow, error) {
	vs, err := s.ents.ListVersions(ctx, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("web: versions: %w", err)
	}
	out := make([]VersionRow, 0, len(vs))
	for _, v := range vs {
		out = append(out, VersionRow(v))
	}
	return out, nil
}

// keyWithSessions is one of the tenant's keys and the number of dashboard
// sessions opened with it that are still live: revoking the key ends them
// (a session lives only while the key that opened it does).
func (s *store) keyWithSessions(ctx context.Context, keyID, tenantID string) (KeyRow, int64, error) {
	k, err := s.creds.TenantKey(ctx, tenantID, keyID)
	if err != nil {
		return KeyRow{}, 0, fmt.Errorf("web: key: %w", err)
	}
	var sessions int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM web_sessions WHERE api_key_id = $1 AND expires_at > now()`, k.ID).Scan(&sessions); err != nil {
		return KeyRow{}, 0, fmt.Errorf("web: key sessions: %w", err)
	}
	return KeyRow(k), sessions, nil
}

// tenantNames names tenants by id, the first limit of them by name.
func (s *store) tenantNames(ctx context.Context, tenantIDs []string, limit int) ([]tenantLink, error) {
	ns, err := s.ents.TenantNames(ctx, tenantIDs, limit)
	if err != nil {
		return nil, fmt.Errorf("web: tenant names: %w", err)
	}
	out := make([]tenantLink, 0, len(ns))
	for _, n := range ns {
		out = append(out, tenantLink{ID: n.ID, Name: n.Name})
	}
	return out, nil
}

// nameTenants is tenant id → name for the ids given (those that exist):
// lists of events, repairs and reports name their tenants.
func (s *store) nameTenants(ctx context.Context, tenantIDs []string) (map[string]string, error) {
	ns, err := s.ents.TenantNames(ctx, tenantIDs, 0)
	if err != nil {
		return nil, fmt.Errorf("web: tenant names: %w", err)
	}
	out := make(map[string]string, len(ns))
	for _, n := range ns {
		out[n.ID] = n.Name
	}
	return out, nil
}

// tenantByCustomer is the tenant linked to a Stripe customer.
func (s *store) tenantByCustomer(ctx context.Context, customer string) (tenantLink, error) {
	t, err := s.ents.TenantByCustomer(ctx, customer)
	if err != nil {
		return tenantLink{}, fmt.Errorf("web: tenant by customer: %w", err)
	}
	return tenantLink{ID: t.ID, Name: t.Name}, nil
}
