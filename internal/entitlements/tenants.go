package entitlements

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/cursor"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
)

// Tenant is a paying customer of the SaaS.
type Tenant struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	Plan             string `json:"plan"` // the plan assigned; the effective one may differ (see TenantDetail)
	StripeCustomerID string `json:"stripe_customer_id,omitempty"`
	// ExternalID is the backend's own id for the tenant (nil = none):
	// unique, case-sensitive, see ValidExternalID.
	ExternalID         *string   `json:"external_id"`
	StripeFeatures     []string  `json:"stripe_features"`
	PeriodAnchor       time.Time `json:"period_anchor"`
	EntitlementVersion int64     `json:"entitlement_version"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
	// PlanVersion is the plan version a grandfathered tenant keeps (after
	// a PATCH with "apply": "new"); nil = the plan's current version.
	PlanVersion *int64 `json:"plan_version"`
}

// TenantInput is the body of a tenant create; Plan defaults to the default plan.
type TenantInput struct {
	Name             string `json:"name"`
	Plan             string `json:"plan"`
	StripeCustomerID string `json:"stripe_customer_id"`
	ExternalID       string `json:"external_id"` // optional
}

// Validate checks every field, naming the bad ones.
func (in *TenantInput) Validate() error {
	var v apperr.Validation
	name := strings.TrimSpace(in.Name)
	switch {
	case name == "":
		v.Add("name", "is required")
	case len([]rune(name)) > maxNameLen:
		v.Add("name", "must be at most %d characters", maxNameLen)
	case !apperr.CleanText(name):
		v.Add("name", "must be UTF-8 text without control characters")
	}
	if in.Plan != "" && !catalogue.ValidPlanKey(in.Plan) {
		v.Add("plan", "must be a plan key [a-z0-9_-]{1,64}")
	}
	if c := in.StripeCustomerID; c != "" && (len(c) > 255 || !apperr.Token(c)) {
		v.Add("stripe_customer_id", "must be a Stripe customer id such as cus_123")
	}
	if e := in.ExternalID; e != "" && !ValidExternalID(e) {
		v.Add("external_id", externalIDRule)
	}
	return v.Err()
}

// Subscription is the tenant's Stripe subscription as billing last stored it.
type Subscription struct {
	ID                 string     `json:"id"`
	Status             string     `json:"status"`
	StripePriceID      string     `json:"stripe_price_id,omitempty"`
	CurrentPeriodStart *time.Time `json:"current_period_start"`
	CurrentPeriodEnd   *time.Time `json:"current_period_end"`
	CancelAtPeriodEnd  bool       `json:"cancel_at_period_end"`
	TrialEnd           *time.Time `json:"trial_end"`
	PastDueSince       *time.Time `json:"past_due_since"`
	GraceEndsAt        *time.Time `json:"grace_ends_at"`
	// LastEventID is the Stripe event whose state the row holds ("" when
	// an admin or a resync wrote it).
	LastEventID string `json:"last_event_id,omitempty"`
	// Seats is the quantity of the plan item (per-seat quotas multiply by it).
	Seats int64 `json:"seats"`
	// Addons are the items whose price is mapped to an add-on grant.
	Addons []SubscriptionAddon `json:"addons"`
}

// SubscriptionAddon is an add-on item of the subscription.
type SubscriptionAddon struct {
	StripePriceID string `json:"stripe_price_id"`
	Name          string `json:"name"`
	Quantity      int64  `json:"quantity"`
	// SubscriptionID is the subscription the item is on: the plan's, or
	// one that bills the add-on on its own.
	SubscriptionID string `json:"subscription_id"`
}

// MeterUsage is the usage of one meter in the current period.
type MeterUsage struct {
	Meter string `json:"meter"`
	Used  int64  `json:"used"`
	Limit *int64 `json:"limit"` // nil = unlimited
	Mode  string `json:"mode,omitempty"`
	// Source says where Used came from: "redis" (the live counter) or
	// "postgres" (the durable figure, when Redis has no counter).
	Source string `json:"source"`
}

// TenantDetail is a tenant with everything an admin needs to see.
type TenantDetail struct {
	Tenant
	// Status is the access status: the subscription's, or "active" without one.
	Status        string           `json:"status"`
	EffectivePlan string           `json:"effective_plan"`
	Subscription  *Subscription    `json:"subscription"`
	Entitlements  limiter.Snapshot `json:"entitlements"`
	// Addons are the add-on items of every live subscription (the plan's
	// and ones that bill an add-on on its own).
	Addons []SubscriptionAddon `json:"addons"`
	// OverlappingSubscriptions are the other live subscriptions with a
	// plan item: the plan comes from Subscription only (the one that
	// started last); these are shown so that an admin can cancel them.
	OverlappingSubscriptions []string `json:"overlapping_subscriptions"`
	// Usage is left empty here: "used" is metering's (it owns the usage
	// tables, and metering imports entitlements, not the other way), so
	// the reader layer (httpapi) fills it from metering.Service.Usage,
	// the function behind GET /v1/usage, the dashboard and the console.
	Usage []MeterUsage `json:"usage"`
}

// ListQuery selects a page of tenants, newest first.
type ListQuery struct {
	Q string // case-insensitive part of the name, or an exact Stripe customer id, external id or tenant id
	// ExternalID, when set, selects the one tenant with that external id.
	ExternalID string
	Limit      int    // 1-200; 0 = 50
	Cursor     string // NextCursor of the previous page
}

// Page is one page of tenants.
type Page struct {
	Tenants    []Tenant `json:"tenants"`
	NextCursor string   `json:"next_cursor,omitempty"`
}

const tenantCols = `t.id::text, t.name, t.plan_key, coalesce(t.stripe_customer_id, ''), t.external_id, t.stripe_features,
       t.period_anchor, t.entitlement_version, t.created_at, t.updated_at, t.plan_version`

func scanTenant(row pgx.CollectableRow) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.Name, &t.Plan, &t.StripeCustomerID, &t.ExternalID, &t.StripeFeatures, &t.PeriodAnchor,
		&t.EntitlementVersion, &t.CreatedAt, &t.UpdatedAt, &t.PlanVersion)
	if t.StripeFeatures == nil {
		t.StripeFeatures = []string{}
	}
	return t, err
}

// CreateTenant stores a tenant at entitlement version 1 and publishes its
// first snapshot.
func (s *Service) CreateTenant(ctx context.Context, in TenantInput) (Tenant, error) {
	if err := in.Validate(); err != nil {
		return Tenant{}, err
	}
	if in.Plan == "" {
		in.Plan = s.opts.DefaultPlan
	}
	var (
		t    Tenant
		snap limiter.Snapshot
	)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		exists, err := catalogue.PlanExists(ctx, tx, in.Plan)
		if err != nil {
			return err
		}
		if !exists {
			return apperr.Invalidf("plan", "no plan %q", in.Plan)
		}
		rows, err := tx.Query(ctx, `
INSERT INTO tenants AS t (name, plan_key, stripe_customer_id, period_anchor, external_id)
VALUES ($1, $2, nullif($3, ''), $4, nullif($5, ''))
RETURNING `+tenantCols, strings.TrimSpace(in.Name), in.Plan, in.StripeCustomerID, s.opts.Now().UTC(), in.ExternalID)
		if err != nil {
			return pgError(err)
		}
		if t, err = pgx.CollectExactlyOneRow(rows, scanTenant); err != nil {
			return pgError(err)
		}
		if snap, err = s.buildSnapshot(ctx, tx, t.ID); err != nil {
			return err
		}
		return recordVersion(ctx, tx, snap, "tenant created")
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: create tenant: %w", err)
	}
	s.log.InfoContext(ctx, "tenant created", "tenant_id", t.ID, "plan", t.Plan)
	s.publishRetried(ctx, snap)
	s.publishAlias(ctx, t.ID, "", deref(t.ExternalID), snap.Version)
	return t, nil
}

// ListTenants returns one page of tenants, newest first.
func (s *Service) ListTenants(ctx context.Context, q ListQuery) (Page, error) {
	if q.Limit == 0 {
		q.Limit = 50
	}
	if q.Limit < 1 || q.Limit > 200 {
		return Page{}, apperr.Invalidf("limit", "must be between 1 and 200")
	}
	if len(q.Q) > 200 || !apperr.CleanText(q.Q) {
		return Page{}, apperr.Invalidf("q", "must be at most 200 characters of UTF-8 text")
	}
	if q.ExternalID != "" && !ValidExternalID(q.ExternalID) {
		return Page{}, apperr.Invalidf("external_id", externalIDRule)
	}
	var ext *string
	if q.ExternalID != "" {
		ext = &q.ExternalID
	}
	var (
		curAt *time.Time
		curID *string
	)
	if q.Cursor != "" {
		at, id, ok := cursor.Decode(q.Cursor)
		if !ok || !ids.IsUUID(id) {
			return Page{}, apperr.Invalidf("cursor", "is not a cursor this API returned")
		}
		curAt, curID = &at, &id
	}
	var pattern *string
	if q.Q != "" {
		p := "%" + likeEscape(strings.ToLower(q.Q)) + "%"
		pattern = &p
	}
	rows, err := s.db.Query(ctx, `
SELECT `+tenantCols+` FROM tenants t
 WHERE ($1::text IS NULL OR lower(t.name) LIKE $1 OR t.stripe_customer_id = $2 OR t.external_id = $2 OR t.id::text = lower($2))
   AND ($3::timestamptz IS NULL OR (t.created_at, t.id) < ($3, $4::uuid))
   AND ($6::text IS NULL OR t.external_id = $6)
 ORDER BY t.created_at DESC, t.id DESC
 LIMIT $5`, pattern, q.Q, curAt, curID, q.Limit+1, ext)
	if err != nil {
		return Page{}, fmt.Errorf("entitlements: list tenants: %w", err)
	}
	ts, err := pgx.CollectRows(rows, scanTenant)
	if err != nil {
		return Page{}, fmt.Errorf("entitlements: list tenants: %w", err)
	}
	page := Page{Tenants: ts}
	if len(ts) > q.Limit {
		page.Tenants = ts[:q.Limit]
		last := page.Tenants[q.Limit-1]
		page.NextCursor = cursor.Encode(last.CreatedAt, last.ID)
	}
	if page.Tenants == nil {
		page.Tenants = []Tenant{}
	}
	return page, nil
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func tenantNotFound(id string) error {
	return apperr.New(apperr.NotFound, "no tenant %q", id)
}

// GetTenantRow returns the tenant alone (no snapshot or usage).
func (s *Service) GetTenantRow(ctx context.Context, id string) (Tenant, error) {
	t, err := getTenant(ctx, s.db, id, false)
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: get tenant: %w", err)
	}
	return t, nil
}

func getTenant(ctx context.Context, q postgres.Querier, id string, lock bool) (Tenant, error) {
	if !ids.IsUUID(id) {
		return Tenant{}, tenantNotFound(id)
	}
	sql := `SELECT ` + tenantCols + ` FROM tenants t WHERE t.id = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE` // does not block inserts that reference the tenant
	}
	rows, err := q.Query(ctx, sql, id)
	if err != nil {
		return Tenant{}, err
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, tenantNotFound(id)
	}
	return t, err
}

// GetTenant returns the tenant with its subscription, effective
// entitlements and current usage.
func (s *Service) GetTenant(ctx context.Context, id string) (TenantDetail, error) {
	d, err := s.detail(ctx, id)
	if err != nil {
		return TenantDetail{}, fmt.Errorf("entitlements: get tenant: %w", err)
	}
	return d, nil
}

func (s *Service) detail(ctx context.Context, id string) (TenantDetail, error) {
	t, err := getTenant(ctx, s.db, id, false)
	if err != nil {
		return TenantDetail{}, err
	}
	in := inputs{tenant: t}
	if err := s.fill(ctx, s.db, &in); err != nil {
		return TenantDetail{}, err
	}
	snap := s.compute(in, nil)
	addons := make([]SubscriptionAddon, 0, len(in.addons))
	for _, a := range in.addons {
		addons = append(addons, SubscriptionAddon{StripePriceID: a.price, Name: a.name, Quantity: a.qty, SubscriptionID: a.sub})
	}
	overlapping := in.overlapping
	if overlapping == nil {
		overlapping = []string{}
	}
	return TenantDetail{Tenant: t, Status: snap.Status, EffectivePlan: snap.Plan, Subscription: in.sub, Entitlements: snap,
		Addons: addons, OverlappingSubscriptions: overlapping}, nil
}

// TenantByCustomer finds the tenant linked to a Stripe customer.
func (s *Service) TenantByCustomer(ctx context.Context, stripeCustomerID string) (Tenant, error) {
	rows, err := s.db.Query(ctx, `SELECT `+tenantCols+` FROM tenants t WHERE t.stripe_customer_id = $1`, stripeCustomerID)
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: tenant by customer: %w", err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, apperr.New(apperr.NotFound, "no tenant with Stripe customer %q", stripeCustomerID)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("entitlements: tenant by customer: %w", err)
	}
	return t, nil
}

// SetPlan puts the tenant on another plan locally (no Stripe call), bumps
// its entitlement version and publishes the new snapshot.
func (s *Service) SetPlan(ctx context.Context, tenantID, planKey, reason string) (TenantDetail, error) {
	if !catalogue.ValidPlanKey(planKey) {
		return TenantDetail{}, apperr.Invalidf("plan", "must be a plan key [a-z0-9_-]{1,64}")
	}
	if reason == "" {
		reason = "plan set to " + planKey
	}
	var snap limiter.Snapshot
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := setPlanTx(ctx, tx, tenantID, planKey); err != nil {
			return err
		}
		var err error
		snap, err = s.BumpVersionTx(ctx, tx, tenantID, reason)
		return err
	})
	if err != nil {
		return TenantDetail{}, fmt.Errorf("entitlements: set plan: %w", err)
	}
	s.log.InfoContext(ctx, "tenant plan set", "tenant_id", tenantID, "plan", planKey, "version", snap.Version)
	s.publishRetried(ctx, snap)
	return s.GetTenant(ctx, tenantID)
}

// setPlanTx puts the tenant on planKey inside tx (SetPlan and its preview).
func setPlanTx(ctx context.Context, tx pgx.Tx, tenantID, planKey string) error {
	if !catalogue.ValidPlanKey(planKey) {
		return apperr.Invalidf("plan", "must be a plan key [a-z0-9_-]{1,64}")
	}
	if _, err := getTenant(ctx, tx, tenantID, true); err != nil {
		return err
	}
	exists, err := catalogue.PlanExists(ctx, tx, planKey)
	if err != nil {
		return err
	}
	if !exists {
		return apperr.Invalidf("plan", "no plan %q", planKey)
	}
	// A new plan is its current version; the same plan keeps the version
	// the tenant holds (grandfathered until migrated).
	if _, err := tx.Exec(ctx, `UPDATE tenants SET plan_version = CASE WHEN plan_key = $2 THEN plan_version END, plan_key = $2, updated_at = now()
		WHERE id = $1`, tenantID, planKey); err != nil {
		return pgError(err)
	}
	return nil
}

// PlanChanger changes a tenant's plan, for the admin API (PUT
// /admin/v1/tenants/{id}/plan) and the console: Service itself locally, or
// billing's Stripe-backed changer when STRIPE_SECRET_KEY is set.
type PlanChanger interface {
	ChangePlan(ctx context.Context, tenantID, planKey string) (TenantDetail, error)
}

// ChangePlan is the admin's plan change without Stripe: SetPlan with a
// reason saying so. It makes Service a PlanChanger.
func (s *Service) ChangePlan(ctx context.Context, tenantID, planKey string) (TenantDetail, error) {
	return s.SetPlan(ctx, tenantID, planKey, "admin changed plan to "+planKey)
}
