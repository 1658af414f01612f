package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/limiter"
)

// newStripeClient builds a client of its own (not stripe-go's globals) so
// that several services in one process can point at different bases.
func newStripeClient(key, base string) *client.API {
	cfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{},
		MaxNetworkRetries: stripe.Int64(2),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if base != "" {
		cfg.URL = stripe.String(strings.TrimRight(base, "/"))
	}
	backends := &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, cfg),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, cfg),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, cfg),
	}
	return client.New(key, backends)
}

// stripeError turns a failed Stripe call into a 502 carrying Stripe's message.
func stripeError(what string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) && se.Msg != "" {
		return apperr.New(apperr.Upstream, "Stripe refused to %s: %s", what, se.Msg)
	}
	return apperr.New(apperr.Upstream, "Stripe could not be reached to %s: %v", what, err)
}

// listFeatures lists a customer's active entitlement lookup keys.
func (s *Service) listFeatures(ctx context.Context, customer string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.EntitlementsActiveEntitlementListParams{Customer: stripe.String(customer)}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	it := s.stripe.EntitlementsActiveEntitlements.List(params)
	keys := []string{}
	for it.Next() {
		if e := it.EntitlementsActiveEntitlement(); e != nil && e.LookupKey != "" {
			keys = append(keys, e.LookupKey)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("billing: list active entitlements: %w", err)
	}
	return normalizeKeys(keys), nil
}

// ChangePlan puts a tenant on another plan. A tenant with a live
// subscription, when Stripe is configured, is changed in Stripe first (the
// subscription item's price, with proration) and applied here only when
// Stripe accepted; the webhook that follows then finds nothing to change.
// Otherwise the change is local. It makes Service an httpapi.PlanChanger.
func (s *Service) ChangePlan(ctx context.Context, tenantID, planKey string) (entitlements.TenantDetail, error) {
	reason := "admin changed plan to " + planKey
	if s.stripe == nil || !ids.IsUUID(tenantID) {
		return s.ents.SetPlan(ctx, tenantID, planKey, reason)
	}
	var sub struct {
		ID, Customer, ItemID, PriceID string
		Version                       int64
	}
	err := s.db.QueryRow(ctx, `
		SELECT s.id, s.stripe_customer_id, COALESCE(s.stripe_item_id, ''), COALESCE(s.stripe_price_id, ''), t.entitlement_version
		FROM subscriptions s JOIN tenants t ON t.id = s.tenant_id
		WHERE s.tenant_id = $1 AND s.status IN ('active', 'trialing', 'past_due')
		ORDER BY s.updated_at DESC LIMIT 1`, tenantID).Scan(&sub.ID, &sub.Customer, &sub.ItemID, &sub.PriceID, &sub.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.ents.SetPlan(ctx, tenantID, planKey, reason)
	}
	if err != nil {
		return entitlements.TenantDetail{}, fmt.Errorf("billing: load subscription: %w", err)
	}
	plan, err := s.ents.GetPlan(ctx, planKey)
	if apperr.CodeOf(err) == apperr.NotFound {
		return entitlements.TenantDetail{}, apperr.Invalidf("plan", "no plan %q", planKey)
	}
	if err != nil {
		return entitlements.TenantDetail{}, err
	}
	if plan.StripePriceID == "" {
		return entitlements.TenantDetail{}, apperr.Invalidf("plan", "plan %q has no stripe_price_id, so a tenant with a Stripe subscription cannot move to it", planKey)
	}
	// Events Stripe created before this call describe the subscription as
	// it was before the change: once the change is applied they are stale.
	sent := s.opts.Now().Truncate(time.Second)
	if plan.StripePriceID != sub.PriceID {
		itemID, err := s.updateSubscriptionPrice(ctx, tenantID, planKey, sub.ID, sub.ItemID, plan.StripePriceID, sub.Version)
		if err != nil {
			return entitlements.TenantDetail{}, err
		}
		sub.ItemID = itemID
	}
	// Stripe accepted: apply the same change here, as its webhook would.
	var snap limiter.Snapshot
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('tollgate.stripe_customer:' || $1, 0))`, sub.Customer); err != nil {
			return fmt.Errorf("billing: lock customer: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE subscriptions SET stripe_price_id = $2, updated_at = now(),
				stripe_item_id = COALESCE(NULLIF($4, ''), stripe_item_id),
				last_event_at = GREATEST(COALESCE(last_event_at, $3), $3) WHERE id = $1`, sub.ID, plan.StripePriceID, sent, sub.ItemID); err != nil {
			return fmt.Errorf("billing: set subscription price: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET plan_key = $2, updated_at = now() WHERE id = $1`, tenantID, planKey); err != nil {
			return fmt.Errorf("billing: set plan: %w", err)
		}
		snap, err = s.ents.BumpTx(ctx, tx, tenantID, reason+" (through Stripe)")
		return err
	})
	if err != nil {
		return entitlements.TenantDetail{}, fmt.Errorf("billing: apply plan change: %w", err)
	}
	if err := s.ents.Publish(ctx, snap); err != nil {
		s.log.WarnContext(ctx, "entitlement snapshot not published", "tenant_id", tenantID, "err", err)
	}
	s.log.InfoContext(ctx, "plan changed through stripe", "tenant_id", tenantID, "plan", planKey, "subscription_id", sub.ID)
	return s.ents.GetTenant(ctx, tenantID)
}

// updateSubscriptionPrice swaps the item's price in Stripe and returns the
// item's id (read from Stripe when we did not know it).
func (s *Service) updateSubscriptionPrice(ctx context.Context, tenantID, planKey, subID, itemID, priceID string, version int64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	if itemID == "" {
		// Rows written before the item was known: ask Stripe for it.
		gp := &stripe.SubscriptionParams{}
		gp.Context = ctx
		got, err := s.stripe.Subscriptions.Get(subID, gp)
		if err != nil {
			return "", stripeError("read the subscription", err)
		}
		if got.Items == nil || len(got.Items.Data) == 0 {
			return "", apperr.New(apperr.Upstream, "Stripe subscription %s has no items", subID)
		}
		itemID = got.Items.Data[0].ID
	}
	params := &stripe.SubscriptionParams{
		Items:             []*stripe.SubscriptionItemsParams{{ID: stripe.String(itemID), Price: stripe.String(priceID)}},
		ProrationBehavior: stripe.String("create_prorations"),
	}
	params.Context = ctx
	// The same request (tenant, plan, subscription, version) retried is the
	// same change to Stripe; after any other change the version differs.
	sum := sha256.Sum256([]byte(fmt.Sprintf("plan-change|%s|%s|%s|%d", tenantID, planKey, subID, version)))
	params.SetIdempotencyKey("tollgate-" + hex.EncodeToString(sum[:16]))
	if _, err := s.stripe.Subscriptions.Update(subID, params); err != nil {
		s.log.WarnContext(ctx, "stripe plan change refused", "tenant_id", tenantID, "subscription_id", subID, "err", err)
		return "", stripeError("change the subscription's price", err)
	}
	return itemID, nil
}
