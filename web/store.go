package web

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// store is the read model of the dashboard and the console: plain queries
// over the schema, each scoped by the tenant id it is given. Writes that
// change what a tenant may do go through the other parts' services; the only
// tables written here are the web's own (sessions and dashboard links).
// The queries are split by reader: store_dashboard.go, store_console.go and
// store_stripe.go; this file has what both the dashboard and the console use.
type store struct {
	db *pgxpool.Pool
}

// notFound turns "no rows" and malformed ids into apperr NotFound, so that
// a bad or foreign id in a URL is a 404 and never a 500.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return apperr.New(apperr.NotFound, "%s not found", what)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "22P02" || pe.Code == "23503") { // invalid_text_representation, foreign_key_violation
		return apperr.New(apperr.NotFound, "%s not found", what)
	}
	return err
}

// TenantRow is a tenant as the pages show it.
type TenantRow struct {
	ID                 string
	Name               string
	PlanKey            string
	PlanName           string
	StripeCustomerID   string
	ExternalID         string // "" when none
	StripeFeatures     []string
	PeriodAnchor       time.Time
	EntitlementVersion int64
	CreatedAt          time.Time
	SubStatus          string // "" when the tenant has no subscription
}

// SubscriptionRow is the tenant's current subscription
// (entitlements.CurrentSubscriptionOf: the one the limiter enforces).
type SubscriptionRow struct {
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

func (s *store) tenant(ctx context.Context, id string) (TenantRow, error) {
	if !ids.IsUUID(id) {
		return TenantRow{}, apperr.New(apperr.NotFound, "tenant not found")
	}
	var t TenantRow
	var cus *string
	err := s.db.QueryRow(ctx, `
		SELECT t.id, t.name, t.plan_key, p.name, t.stripe_customer_id, coalesce(t.external_id, ''), t.stripe_features,
		       t.period_anchor, t.entitlement_version, t.created_at,
		       COALESCE((SELECT s.status FROM (`+entitlements.CurrentSubscriptionOf("t.id")+`) s), '')
		FROM tenants t JOIN plans p ON p.key = t.plan_key
		WHERE t.id = $1`, id).Scan(&t.ID, &t.Name, &t.PlanKey, &t.PlanName, &cus, &t.ExternalID, &t.StripeFeatures,
		&t.PeriodAnchor, &t.EntitlementVersion, &t.CreatedAt, &t.SubStatus)
	if err != nil {
		return TenantRow{}, fmt.Errorf("web: tenant: %w", notFound(err, "tenant"))
	}
	if cus != nil {
		t.StripeCustomerID = *cus
	}
	return t, nil
}

func (s *store) subscription(ctx context.Context, tenantID string) (*SubscriptionRow, error) {
	var r SubscriptionRow
	var price *string
	err := s.db.QueryRow(ctx, `
		SELECT id, status, stripe_price_id, current_period_start, current_period_end, cancel_at_period_end,
		       trial_end, trial_will_end_at, past_due_since, grace_ends_at, payment_attempts,
		       next_payment_attempt, canceled_at, updated_at
		FROM (`+entitlements.CurrentSubscriptionOf("$1")+`) s`, tenantID).Scan(
		&r.ID, &r.Status, &price, &r.PeriodStart, &r.PeriodEnd, &r.CancelAtPeriodEnd, &r.TrialEnd,
		&r.TrialWillEndAt, &r.PastDueSince, &r.GraceEndsAt, &r.PaymentAttempts, &r.NextPaymentAttempt,
		&r.CanceledAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("web: subscription: %w", err)
	}
	if price != nil {
		r.PriceID = *price
	}
	return &r, nil
}
