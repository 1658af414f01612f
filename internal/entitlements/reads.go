package entitlements

// Reads for the console and the dashboard (issue 24): the web shows these
// tables but does not own them, so it asks here rather than running its own
// SQL over them. Each function answers one page's question in one query.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// TenantSummary is a tenant with the name of its assigned plan and the
// status of its current subscription ("" when it has none).
type TenantSummary struct {
	Tenant
	PlanName  string
	SubStatus string
}

var summaryCols = tenantCols + `,
       coalesce((SELECT c.status FROM current_subscriptions c WHERE c.tenant_id = t.id), '')`

func scanSummary(row pgx.CollectableRow) (TenantSummary, error) {
	var t TenantSummary
	err := row.Scan(&t.ID, &t.Name, &t.Plan, &t.StripeCustomerID, &t.ExternalID, &t.StripeFeatures, &t.PeriodAnchor,
		&t.EntitlementVersion, &t.CreatedAt, &t.UpdatedAt, &t.PlanVersion, &t.SubStatus)
	if t.StripeFeatures == nil {
		t.StripeFeatures = []string{}
	}
	return t, err
}

// namePlans fills the summaries' plan names from the catalogue: one query
// for the page, as the join it replaces was.
func namePlans(ctx context.Context, q postgres.Querier, ts []TenantSummary) error {
	keys := make([]string, 0, len(ts))
	for _, t := range ts {
		if !slices.Contains(keys, t.Plan) {
			keys = append(keys, t.Plan)
		}
	}
	names, err := catalogue.PlanNames(ctx, q, keys)
	if err != nil {
		return err
	}
	for i := range ts {
		ts[i].PlanName = names[ts[i].Plan]
	}
	return nil
}

// TenantSummary returns one tenant as the pages head it; NotFound for an
// unknown or malformed id.
func (s *Service) TenantSummary(ctx context.Context, id string) (TenantSummary, error) {
	if !ids.IsUUID(id) {
		return TenantSummary{}, tenantNotFound(id)
	}
	rows, err := s.db.Query(ctx, `SELECT `+summaryCols+` FROM tenants t WHERE t.id = $1`, id)
	if err != nil {
		return TenantSummary{}, fmt.Errorf("entitlements: tenant summary: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanSummary)
	if errors.Is(err, pgx.ErrNoRows) {
		return TenantSummary{}, tenantNotFound(id)
	}
	if err != nil {
		return TenantSummary{}, fmt.Errorf("entitlements: tenant summary: %w", err)
	}
	ts := []TenantSummary{t}
	if err := namePlans(ctx, s.db, ts); err != nil {
		return TenantSummary{}, fmt.Errorf("entitlements: tenant summary: %w", err)
	}
	return ts[0], nil
}

// SearchTenants is the console's numbered tenant list: tenants whose name
// contains q (case-insensitively), or whose id, Stripe customer or
// external id is q,
// newest first, page (1-based) of size, with how many match in all.
// ListTenants is the API's cursor-paged form of the same search.
func (s *Service) SearchTenants(ctx context.Context, q string, page, size int) ([]TenantSummary, int64, error) {
	q = strings.TrimSpace(q)
	like := "%"
	if q != "" {
		like = "%" + likeEscape(strings.ToLower(q)) + "%"
	}
	page, size = max(page, 1), max(size, 1)
	const where = ` WHERE lower(t.name) LIKE $1 OR t.id::text = $2 OR t.stripe_customer_id = $2 OR t.external_id = $2`
	var total int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM tenants t`+where, like, q).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("entitlements: search tenants: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT `+summaryCols+` FROM tenants t`+where+`
 ORDER BY t.created_at DESC, t.id DESC LIMIT $3 OFFSET $4`, like, q, size, (page-1)*size)
	if err != nil {
		return nil, 0, fmt.Errorf("entitlements: search tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanSummary)
	if err != nil {
		return nil, 0, fmt.Errorf("entitlements: search tenants: %w", err)
	}
	if err := namePlans(ctx, s.db, out); err != nil {
		return nil, 0, fmt.Errorf("entitlements: search tenants: %w", err)
	}
	return out, total, nil
}

// TenantName is a tenant's id and name.
type TenantName struct {
	ID   string
	Name string
}

// TenantNames names the tenants of ids that exist, by name (then id), at
// most limit of them (0 = all): pages that list events or repairs name
// their tenants, and a plan's page names the first of its tenants.
func (s *Service) TenantNames(ctx context.Context, tenantIDs []string, limit int) ([]TenantName, error) {
	valid := make([]string, 0, len(tenantIDs))
	for _, id := range tenantIDs {
		if ids.IsUUID(id) {
			valid = append(valid, id)
		}
	}
	if len(valid) == 0 {
		return []TenantName{}, nil
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.db.Query(ctx, `SELECT id::text, name FROM tenants WHERE id = ANY($1::uuid[]) ORDER BY lower(name), id LIMIT $2`, valid, lim)
	if err != nil {
		return nil, fmt.Errorf("entitlements: tenant names: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TenantName])
	if err != nil {
		return nil, fmt.Errorf("entitlements: tenant names: %w", err)
	}
	return out, nil
}

// PlanTenantCounts is how many tenants each plan is assigned to; a plan
// without tenants is absent.
func (s *Service) PlanTenantCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.Query(ctx, `SELECT plan_key, count(*) FROM tenants GROUP BY plan_key`)
	if err != nil {
		return nil, fmt.Errorf("entitlements: plan tenant counts: %w", err)
	}
	out := map[string]int64{}
	var key string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { out[key] = n; return nil }); err != nil {
		return nil, fmt.Errorf("entitlements: plan tenant counts: %w", err)
	}
	return out, nil
}

// SubscriptionState is the tenant's current subscription with the
// dunning and trial fields the dashboard shows.
type SubscriptionState struct {
	ID                 string
	Status             string
	PriceID            string
	PeriodStart        *time.Time
	PeriodEnd          *time.Time
	CancelAtPeriodEnd  bool
	TrialEnd           *time.Time
	TrialWillEndAt     *time.Time
	PastDueSince       *time.Time
	GraceEndsAt        *time.Time
	PaymentAttempts    int
	NextPaymentAttempt *time.Time
	CanceledAt         *time.Time
	UpdatedAt          time.Time
}

// CurrentSubscription is the tenant's current subscription (the one the
// limiter enforces: the view current_subscriptions); nil when it never had one.
func (s *Service) CurrentSubscription(ctx context.Context, tenantID string) (*SubscriptionState, error) {
	if !ids.IsUUID(tenantID) {
		return nil, nil
	}
	var r SubscriptionState
	err := s.db.QueryRow(ctx, `
SELECT id, status, coalesce(stripe_price_id, ''), current_period_start, current_period_end, cancel_at_period_end,
       trial_end, trial_will_end_at, past_due_since, grace_ends_at, payment_attempts,
       next_payment_attempt, canceled_at, updated_at
  FROM current_subscriptions s WHERE s.tenant_id = $1`, tenantID).Scan(
		&r.ID, &r.Status, &r.PriceID, &r.PeriodStart, &r.PeriodEnd, &r.CancelAtPeriodEnd, &r.TrialEnd,
		&r.TrialWillEndAt, &r.PastDueSince, &r.GraceEndsAt, &r.PaymentAttempts, &r.NextPaymentAttempt,
		&r.CanceledAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("entitlements: current subscription: %w", err)
	}
	return &r, nil
}

// OtherSubscription is a subscription of the tenant besides the current
// one: an overlapping plan subscription (a re-subscribe beside the old
// one, which grants its add-ons, never the plan) or one that bills add-ons
// on its own.
type OtherSubscription struct {
	ID                string
	Status            string
	PriceID           string
	CancelAtPeriodEnd bool
	PlanItem          bool
	Overlapping       bool // live with a plan item: not enforced, shown so that an admin can cancel it
}

// OtherSubscriptions lists the tenant's subscriptions other than the
// current one, live ones first, at most limit.
func (s *Service) OtherSubscriptions(ctx context.Context, tenantID string, limit int) ([]OtherSubscription, error) {
	if !ids.IsUUID(tenantID) {
		return []OtherSubscription{}, nil
	}
	rows, err := s.db.Query(ctx, `
SELECT s.id, s.status, coalesce(s.stripe_price_id, ''), s.cancel_at_period_end, s.has_plan_item,
       s.id IN (`+OverlappingSubscriptionsOf("$1")+`)
  FROM subscriptions s
 WHERE s.tenant_id = $1 AND s.id IS DISTINCT FROM (SELECT c.id FROM current_subscriptions c WHERE c.tenant_id = $1)
 ORDER BY s.status IN (`+liveStatuses+`) DESC, s.start_date DESC NULLS LAST, s.id LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("entitlements: other subscriptions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[OtherSubscription])
	if err != nil {
		return nil, fmt.Errorf("entitlements: other subscriptions: %w", err)
	}
	return out, nil
}

// Version is one entitlement version of a tenant.
type Version struct {
	Version   int64
	Reason    string
	CreatedAt time.Time
}

// ListVersions lists the tenant's last limit entitlement versions, newest
// first.
func (s *Service) ListVersions(ctx context.Context, tenantID string, limit int) ([]Version, error) {
	if !ids.IsUUID(tenantID) {
		return []Version{}, nil
	}
	rows, err := s.db.Query(ctx, `
SELECT version, reason, created_at FROM entitlement_versions
 WHERE tenant_id = $1 ORDER BY version DESC LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("entitlements: list versions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Version])
	if err != nil {
		return nil, fmt.Errorf("entitlements: list versions: %w", err)
	}
	return out, nil
}
