package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// Self-serve plan changes (issue 14): a tenant picks a public plan on its
// dashboard and is sent to Stripe, which takes the payment and confirms.
// Nothing is granted here: the plan follows from Stripe's webhooks
// (checkout.session.completed links the customer, the subscription events
// carry the plan), exactly as for a subscription made anywhere else.
//
//   - Without a live subscription: a Checkout Session (mode subscription,
//     the plan's price, client_reference_id = the tenant), on the tenant's
//     Stripe customer, created first when the tenant has none.
//   - With one: a customer-portal session on the subscription_update_confirm
//     flow for the plan item's new price. The tenant sees on Stripe what the
//     change costs (the proration) and confirms it with its own payment
//     method, 3-D Secure included; the admin's ChangePlan instead updates
//     the subscription at once and bills without asking anyone, which is
//     right for an admin and wrong for a customer clicking a button.

// Kinds of Upgrade.
const (
	UpgradeCheckout = "checkout"
	UpgradePortal   = "portal"
)

// UpgradeURLs are the dashboard's pages Stripe sends the tenant back to.
type UpgradeURLs struct {
	Success string // after a completed Checkout or a confirmed change
	Cancel  string // Checkout abandoned; the portal's "return" link
}

// Upgrade is where to send the tenant to finish a plan change.
type Upgrade struct {
	Kind      string // UpgradeCheckout or UpgradePortal
	URL       string // Stripe's hosted page; a bearer credential, never logged
	SessionID string
}

// liveSub is the subscription a portal change goes through.
type liveSub struct {
	ID, Customer, ItemID, PriceID, Status string
}

// StartUpgrade starts a tenant's own move to a public plan with a Stripe
// price and returns the Stripe page to send it to. An unknown, internal or
// unpriced plan, or the plan the tenant has, is Invalid (field "plan") and
// nothing reaches Stripe; a Stripe error is Upstream with Stripe's message.
func (s *Service) StartUpgrade(ctx context.Context, tenantID, planKey string, urls UpgradeURLs) (Upgrade, error) {
	return s.StartUpgradePrice(ctx, tenantID, planKey, "", urls)
}

// StartUpgradePrice is StartUpgrade through one of the plan's prices (the
// dashboard lists each; "" = the plan's first, its self-serve default). A
// price that is not the plan's is Invalid (field "price").
func (s *Service) StartUpgradePrice(ctx context.Context, tenantID, planKey, priceID string, urls UpgradeURLs) (Upgrade, error) {
	if s.stripe == nil {
		return Upgrade{}, apperr.New(apperr.NotFound, "self-serve plan changes need STRIPE_SECRET_KEY")
	}
	if !ids.IsUUID(tenantID) {
		return Upgrade{}, apperr.New(apperr.NotFound, "tenant not found")
	}
	plan, err := s.cat.GetPlan(ctx, planKey)
	// An internal plan answers like an unknown one: a tenant learns nothing
	// of plans it is not offered.
	if apperr.CodeOf(err) == apperr.NotFound || (err == nil && (!plan.Public || plan.StripePriceID == "")) {
		return Upgrade{}, apperr.Invalidf("plan", "%q is not a plan you can choose", planKey)
	}
	if err != nil {
		return Upgrade{}, err
	}
	switch {
	case priceID == "":
		priceID = plan.StripePriceID
	case !slices.Contains(plan.StripePriceIDs, priceID):
		return Upgrade{}, apperr.Invalidf("price", "%q is not a price of %s", priceID, plan.Name)
	}
	// Checkout and the portal are sent the chosen price.
	plan.StripePriceID = priceID
	tenant, err := s.ents.GetTenantRow(ctx, tenantID)
	if err != nil {
		return Upgrade{}, err
	}
	sub, err := s.currentSub(ctx, tenantID)
	if err != nil {
		return Upgrade{}, err
	}
	if sub != nil && !terminal(sub.Status) {
		if sub.PriceID == plan.StripePriceID {
			return Upgrade{}, apperr.Invalidf("plan", "your subscription is on %s already", plan.Name)
		}
		return s.portalUpgrade(ctx, tenantID, *sub, plan, urls)
	}
	customer := tenant.StripeCustomerID
	if customer == "" {
		if customer, err = s.createCustomer(ctx, tenant); err != nil {
			return Upgrade{}, err
		}
	}
	return s.checkoutUpgrade(ctx, tenantID, customer, plan, urls)
}

// currentSub is the tenant's current subscription (the one the limiter
// enforces), or nil.
func (s *Service) currentSub(ctx context.Context, tenantID string) (*liveSub, error) {
	var sub liveSub
	err := s.db.QueryRow(ctx, `SELECT id, stripe_customer_id, COALESCE(stripe_item_id, ''), COALESCE(stripe_price_id, ''), status
		FROM current_subscriptions s WHERE s.tenant_id = $1`, tenantID).Scan(&sub.ID, &sub.Customer, &sub.ItemID, &sub.PriceID, &sub.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("billing: load subscription: %w", err)
	}
	return &sub, nil
}

// createCustomer creates the tenant's Stripe customer and links it through
// entitlements (the tenants table's owner). The idempotency key is the
// tenant at its entitlement version, so a double click or a retry gets the
// same customer, while a tenant unlinked since (a new version) gets a new one.
func (s *Service) createCustomer(ctx context.Context, tenant entitlements.Tenant) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.CustomerParams{Name: stripe.String(tenant.Name)}
	params.AddMetadata("tenant_id", tenant.ID)
	params.Context = cctx
	sum := sha256.Sum256(fmt.Appendf(nil, "customer|%s|%d", tenant.ID, tenant.EntitlementVersion))
	params.SetIdempotencyKey("tollgate-" + hex.EncodeToString(sum[:16]))
	cus, err := s.stripe.Customers.New(params)
	if err != nil {
		s.log.WarnContext(ctx, "stripe customer not created", "tenant_id", tenant.ID, "err", err)
		return "", stripeError("create your customer", err)
	}
	linked := cus.ID
	_, err = s.ents.WriteAndPublish(ctx, func(ctx context.Context, w *entitlements.Writes) error {
		cur, ok, err := w.LockTenant(ctx, tenant.ID)
		if err != nil {
			return err
		}
		if !ok {
			return apperr.New(apperr.NotFound, "tenant not found")
		}
		if cur != "" {
			// Linked meanwhile (another click, a Checkout webhook): keep it.
			linked = cur
			return nil
		}
		done, err := w.LinkCustomer(ctx, tenant.ID, cus.ID)
		if err != nil {
			return err
		}
		if !done {
			return apperr.New(apperr.Conflict, "Stripe customer %s is linked to another tenant", cus.ID)
		}
		w.Reason("Stripe customer created for a self-serve upgrade")
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("billing: link customer: %w", err)
	}
	s.log.InfoContext(ctx, "stripe customer created for self-serve upgrade", "tenant_id", tenant.ID, "customer", linked)
	return linked, nil
}

func (s *Service) checkoutUpgrade(ctx context.Context, tenantID, customer string, plan catalogue.Plan, urls UpgradeURLs) (Upgrade, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSubscription)),
		Customer:          stripe.String(customer),
		ClientReferenceID: stripe.String(tenantID),
		LineItems:         []*stripe.CheckoutSessionLineItemParams{{Price: stripe.String(plan.StripePriceID), Quantity: stripe.Int64(1)}},
		SuccessURL:        stripe.String(urls.Success),
		CancelURL:         stripe.String(urls.Cancel),
		// The subscription names its tenant too, so that its events link
		// even when they arrive before the completed session.
		SubscriptionData: &stripe.CheckoutSessionSubscriptionDataParams{
			Metadata: map[string]string{"tenant_id": tenantID, "plan": plan.Key},
		},
	}
	params.AddMetadata("tenant_id", tenantID)
	params.AddMetadata("plan", plan.Key)
	params.Context = ctx
	cs, err := s.stripe.CheckoutSessions.New(params)
	if err != nil {
		return Upgrade{}, s.notSent(ctx, "start a Checkout", tenantID, plan.Key, err)
	}
	return s.sent(ctx, Upgrade{Kind: UpgradeCheckout, URL: cs.URL, SessionID: cs.ID}, tenantID, plan.Key)
}

func (s *Service) portalUpgrade(ctx context.Context, tenantID string, sub liveSub, plan catalogue.Plan, urls UpgradeURLs) (Upgrade, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	itemID, err := s.planItemID(ctx, sub.ID, sub.ItemID, sub.PriceID)
	if err != nil {
		return Upgrade{}, err
	}
	params := &stripe.BillingPortalSessionParams{
		Customer:  stripe.String(sub.Customer),
		ReturnURL: stripe.String(urls.Cancel),
		FlowData: &stripe.BillingPortalSessionFlowDataParams{
			Type: stripe.String(string(stripe.BillingPortalSessionFlowTypeSubscriptionUpdateConfirm)),
			SubscriptionUpdateConfirm: &stripe.BillingPortalSessionFlowDataSubscriptionUpdateConfirmParams{
				Subscription: stripe.String(sub.ID),
				Items: []*stripe.BillingPortalSessionFlowDataSubscriptionUpdateConfirmItemParams{
					{ID: stripe.String(itemID), Price: stripe.String(plan.StripePriceID)},
				},
			},
			AfterCompletion: &stripe.BillingPortalSessionFlowDataAfterCompletionParams{
				Type:     stripe.String(string(stripe.BillingPortalSessionFlowAfterCompletionTypeRedirect)),
				Redirect: &stripe.BillingPortalSessionFlowDataAfterCompletionRedirectParams{ReturnURL: stripe.String(urls.Success)},
			},
		},
	}
	params.Context = ctx
	ps, err := s.stripe.BillingPortalSessions.New(params)
	if err != nil {
		return Upgrade{}, s.notSent(ctx, "open the plan change", tenantID, plan.Key, err)
	}
	return s.sent(ctx, Upgrade{Kind: UpgradePortal, URL: ps.URL, SessionID: ps.ID}, tenantID, plan.Key)
}

// Checkout and the portal end alike: Stripe's session is where the tenant
// goes, or nothing started.

// notSent logs Stripe's refusal of a session (what: "start a Checkout") and
// words it for the tenant as Upstream.
func (s *Service) notSent(ctx context.Context, what, tenantID, planKey string, err error) error {
	s.log.WarnContext(ctx, "stripe session not created", "to", what, "tenant_id", tenantID, "plan", planKey, "err", err)
	return stripeError(what, err)
}

// sent checks that Stripe's session has a page to send the tenant to (its
// URL, a bearer credential, is never logged).
func (s *Service) sent(ctx context.Context, u Upgrade, tenantID, planKey string) (Upgrade, error) {
	if u.URL == "" {
		return Upgrade{}, apperr.New(apperr.Upstream, "Stripe answered a %s session without a URL", u.Kind)
	}
	s.log.InfoContext(ctx, "self-serve plan change sent to Stripe", "kind", u.Kind, "tenant_id", tenantID, "plan", planKey, "session_id", u.SessionID)
	return u, nil
}
