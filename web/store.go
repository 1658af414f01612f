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

// store is the read model of the dashboard and the console. It runs SQL
// only over the web's own tables (sessions and dashboard links: links.go,
// session.go); everything else it reads through the tables' owners
// (readers.go), and it only turns their answers into the rows the
// templates show. Writes that change what a tenant may do go through the
// other parts' services (actions.go). The reads are split by reader:
// store_dashboard.go, store_console.go and store_stripe.go; this file has
// what both the dashboard and the console use.
type store struct {
	db    *pgxpool.Pool
	ents  EntitlementsReader
	cat   CatalogueReader
	creds CredentialsReader
	bill  BillingReader
	meter MeteringReader
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
// (the view current_subscriptions: the one the limiter enforces).
type SubscriptionRow = entitlements.SubscriptionState

func (s *store) tenant(ctx context.Context, id string) (TenantRow, error) {
	if !ids.IsUUID(id) {
		return TenantRow{}, apperr.New(apperr.NotFound, "tenant not found")
	}
	t, err := s.ents.TenantSummary(ctx, id)
	if err != nil {
		return TenantRow{}, fmt.Errorf("web: tenant: %w", err)
	}
	r := TenantRow{ID: t.ID, Name: t.Name, PlanKey: t.Plan, PlanName: t.PlanName, StripeCustomerID: t.StripeCustomerID,
		StripeFeatures: t.StripeFeatures, PeriodAnchor: t.PeriodAnchor, EntitlementVersion: t.EntitlementVersion,
		CreatedAt: t.CreatedAt, SubStatus: t.SubStatus}
	if t.ExternalID != nil {
		r.ExternalID = *t.ExternalID
	}
	return r, nil
}

func (s *store) subscription(ctx context.Context, tenantID string) (*SubscriptionRow, error) {
	sub, err := s.ents.CurrentSubscription(ctx, tenantID)
	if err != nil || sub == nil {
		return nil, err
	}
	r := SubscriptionRow(*sub)
	return &r, nil
}
