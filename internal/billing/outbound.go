package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/tracing"
)

// newStripeClient builds a client of its own (not stripe-go's globals) so
// that several services in one process can point at different bases.
func newStripeClient(key, base string) *client.API {
	cfg := &stripe.BackendConfig{
		HTTPClient:        &http.Client{Transport: tracing.Transport(nil)}, // a client span per call while tracing is on
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

// Proration behaviours of plan changes (Options.Proration,
// STRIPE_PRORATION).
const (
	// ProrationCreate: create_prorations, the difference is billed on the
	// next invoice; limits change at once.
	ProrationCreate = "create_prorations"
	// ProrationAlwaysInvoice: always_invoice, the difference is invoiced
	// and charged now; limits change at once.
	ProrationAlwaysInvoice = "always_invoice"
	// ProrationNone: none, no proration; limits change at once.
	ProrationNone = "none"
	// ProrationPaidFirst: always_invoice with payment_behavior
	// pending_if_incomplete: Stripe applies the new price only once its
	// invoice is paid, so limits rise only once paid (the webhook of the
	// paid update applies it). A payment that fails leaves the old plan.
	ProrationPaidFirst = "pending_if_incomplete"
)

// ValidProration reports whether p is one of the Proration values.
func ValidProration(p string) bool {
	switch p {
	case ProrationCreate, ProrationAlwaysInvoice, ProrationNone, ProrationPaidFirst:
		return true
	}
	return false
}

// planSub is the live subscription a plan change goes through.
type planSub struct {
	ID, Customer, ItemID, PriceID string
	Version                       int64
}

// ChangePlan puts a tenant on another plan. A tenant with a live
// subscription, when Stripe is configured, is changed in Stripe first (the
// plan item's price, with the configured proration) and applied here only
// when Stripe applied it; the webhook that follows then finds nothing to
// change. With ProrationPaidFirst a change that waits for its payment is
// not applied here: the tenant keeps its plan until Stripe's webhook says
// the update went through. Otherwise the change is local. It makes Service
// an entitlements.PlanChanger.
func (s *Service) ChangePlan(ctx context.Context, tenantID, planKey string) (entitlements.TenantDetail, error) {
	reason := "admin changed plan to " + planKey
	if s.stripe == nil || !ids.IsUUID(tenantID) {
		return s.ents.SetPlan(ctx, tenantID, planKey, reason)
	}
	// The subscription the limiter enforces; only a live one goes through
	// Stripe, otherwise the change is local.
	// The version first: a change after it shows as a newer version when
	// the change is applied.
	tenant, err := s.ents.GetTenantRow(ctx, tenantID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return s.ents.SetPlan(ctx, tenantID, planKey, reason) // answers the missing tenant as it always has
	}
	if err != nil {
		return entitlements.TenantDetail{}, fmt.Errorf("billing: load tenant: %w", err)
	}
	sub := planSub{Version: tenant.EntitlementVersion}
	var status string
	err = s.db.QueryRow(ctx, `
		SELECT s.id, s.stripe_customer_id, COALESCE(s.stripe_item_id, ''), COALESCE(s.stripe_price_id, ''), s.status
		FROM current_subscriptions s WHERE s.tenant_id = $1`, tenantID).Scan(&sub.ID, &sub.Customer, &sub.ItemID, &sub.PriceID, &status)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !entitlements.Live(status)) {
		return s.ents.SetPlan(ctx, tenantID, planKey, reason)
	}
	if err != nil {
		return entitlements.TenantDetail{}, fmt.Errorf("billing: load subscription: %w", err)
	}
	plan, err := s.cat.GetPlan(ctx, planKey)
	if apperr.CodeOf(err) == apperr.NotFound {
		return entitlements.TenantDetail{}, apperr.Invalidf("plan", "no plan %q", planKey)
	}
	if err != nil {
		return entitlements.TenantDetail{}, err
	}
	if plan.StripePriceID == "" {
		return entitlements.TenantDetail{}, apperr.Invalidf("plan", "plan %q has no stripe_price_id, so a tenant with a Stripe subscription cannot move to it", planKey)
	}
	// A subscription on one of the plan's prices is on the plan already;
	// otherwise it moves to the plan's price of its own interval.
	if slices.Contains(plan.StripePriceIDs, sub.PriceID) {
		plan.StripePriceID = sub.PriceID
	} else {
		plan.StripePriceID = s.priceLike(ctx, plan.StripePriceIDs, sub.PriceID)
	}
	// Events Stripe created before this call describe the subscription as
	// it was before the change: once the change is applied they are stale.
	sent := s.opts.Now().Truncate(time.Second)
	if plan.StripePriceID != sub.PriceID {
		itemID, pending, err := s.updateSubscriptionPrice(ctx, tenantID, planKey, sub, plan.StripePriceID)
		if err != nil {
			return entitlements.TenantDetail{}, err
		}
		if pending {
			s.log.InfoContext(ctx, "plan change waits for its invoice to be paid", "tenant_id", tenantID, "plan", planKey, "subscription_id", sub.ID)
			return s.ents.GetTenant(ctx, tenantID)
		}
		sub.ItemID = itemID
	}
	// Stripe accepted: apply the same change here, as its webhook would.
	_, err = s.ents.WriteAndPublish(ctx, func(ctx context.Context, w *entitlements.Writes) error {
		tx := w.Tx()
		if err := lockCustomer(ctx, tx, sub.Customer); err != nil {
			return err
		}
		if err := w.SetSubscriptionPrice(ctx, sub.ID, sub.ItemID, plan.StripePriceID, sent); err != nil {
			return err
		}
		if _, err := w.SetPlan(ctx, tenantID, planKey); err != nil {
			return err
		}
		w.Reason(reason + " (through Stripe)")
		w.Changed(tenantID)
		return nil
	})
	if err != nil {
		return entitlements.TenantDetail{}, fmt.Errorf("billing: apply plan change: %w", err)
	}
	s.log.InfoContext(ctx, "plan changed through stripe", "tenant_id", tenantID, "plan", planKey, "subscription_id", sub.ID)
	return s.ents.GetTenant(ctx, tenantID)
}

// planChangeKey is the idempotency key of this plan change's current
// attempt. The same request (tenant, plan, subscription, version) retried
// is the same change to Stripe; after Stripe answered it with an error the
// attempt moves on (see failedPlanChange), since Stripe would replay that
// answer for 24 hours under the old key.
func (s *Service) planChangeKey(ctx context.Context, base string) (string, error) {
	var attempt int
	err := s.db.QueryRow(ctx, `INSERT INTO stripe_plan_changes (base_key) VALUES ($1)
		ON CONFLICT (base_key) DO UPDATE SET updated_at = now() RETURNING attempt`, base).Scan(&attempt)
	if err != nil {
		return "", fmt.Errorf("billing: plan change attempt: %w", err)
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s|%d", base, attempt)))
	return "tollgate-" + hex.EncodeToString(sum[:16]), nil
}

// failedPlanChange moves the attempt on after Stripe answered an error. A
// call that got no answer keeps its key: Stripe may have applied it, and
// the same key makes the retry safe.
func (s *Service) failedPlanChange(ctx context.Context, base string, err error) {
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode == 0 {
		return
	}
	if _, dbErr := s.db.Exec(ctx, `UPDATE stripe_plan_changes SET attempt = attempt + 1, last_error = $2, updated_at = now()
		WHERE base_key = $1`, base, err.Error()); dbErr != nil {
		s.log.WarnContext(ctx, "plan change attempt not recorded", "err", dbErr)
	}
}

// updateSubscriptionPrice swaps the plan item's price in Stripe and returns
// the item's id (read from Stripe when we did not know it), and whether the
// update waits for a payment (pending_if_incomplete).
func (s *Service) updateSubscriptionPrice(ctx context.Context, tenantID, planKey string, sub planSub, priceID string) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	itemID, err := s.planItemID(ctx, sub.ID, sub.ItemID, sub.PriceID)
	if err != nil {
		return "", false, err
	}
	proration := s.opts.Proration
	params := &stripe.SubscriptionParams{
		Items: []*stripe.SubscriptionItemsParams{{ID: stripe.String(itemID), Price: stripe.String(priceID)}},
	}
	if proration == ProrationPaidFirst {
		params.ProrationBehavior = stripe.String(ProrationAlwaysInvoice)
		params.PaymentBehavior = stripe.String("pending_if_incomplete")
	} else {
		params.ProrationBehavior = stripe.String(proration)
	}
	params.Context = ctx
	base := fmt.Sprintf("plan-change|%s|%s|%s|%d", tenantID, planKey, sub.ID, sub.Version)
	key, err := s.planChangeKey(ctx, base)
	if err != nil {
		return "", false, err
	}
	params.SetIdempotencyKey(key)
	got, err := s.stripe.Subscriptions.Update(sub.ID, params)
	if err != nil {
		s.failedPlanChange(context.WithoutCancel(ctx), base, err)
		s.log.WarnContext(ctx, "stripe plan change refused", "tenant_id", tenantID, "subscription_id", sub.ID, "err", err)
		return "", false, stripeError("change the subscription's price", err)
	}
	return itemID, got.PendingUpdate != nil, nil
}

// planItemID is the id of the subscription item that carries the plan:
// itemID when we know it, else (rows written before the item was known)
// read from Stripe, the item with the price we have on record.
func (s *Service) planItemID(ctx context.Context, subID, itemID, priceID string) (string, error) {
	if itemID != "" {
		return itemID, nil
	}
	v, err := s.fetchSubscription(ctx, subID)
	if err != nil {
		return "", stripeError("read the subscription", err)
	}
	if v == nil || len(v.Items) == 0 {
		return "", apperr.New(apperr.Upstream, "Stripe subscription %s has no items", subID)
	}
	itemID = v.Items[0].ID
	for _, it := range v.Items {
		if it.PriceID == priceID {
			itemID = it.ID
		}
	}
	return itemID, nil
}
