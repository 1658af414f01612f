package billing

import (
	"context"
	"strconv"

	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// MaxTopupQuantity bounds one purchase: a typo of 10000 instead of 10 on
// the dashboard should not reach a payment page.
const MaxTopupQuantity = 100

// StartTopup sends the tenant to Stripe Checkout in payment mode to buy
// quantity of the top-up price priceID (the dashboard's "Buy more"). The
// session names the top-up in its metadata, so that its completion grants
// it without reading its line items back, and names the tenant, so that a
// guest checkout grants the right one. Nothing is granted here: the
// completed session (or its invoice) does, once (topups.go).
func (s *Service) StartTopup(ctx context.Context, tenantID, priceID string, quantity int64, urls UpgradeURLs) (Upgrade, error) {
	if s.stripe == nil || s.opts.Credits == nil {
		return Upgrade{}, apperr.New(apperr.NotFound, "buying credits needs STRIPE_SECRET_KEY")
	}
	if !ids.IsUUID(tenantID) {
		return Upgrade{}, apperr.New(apperr.NotFound, "tenant not found")
	}
	if quantity < 1 || quantity > MaxTopupQuantity {
		return Upgrade{}, apperr.Invalidf("quantity", "must be a whole number from 1 to %d", MaxTopupQuantity)
	}
	tp, err := s.opts.Credits.GetTopup(ctx, priceID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return Upgrade{}, apperr.Invalidf("price_id", "%q is not a top-up you can buy", priceID)
	}
	if err != nil {
		return Upgrade{}, err
	}
	tenant, err := s.ents.GetTenantRow(ctx, tenantID)
	if err != nil {
		return Upgrade{}, err
	}
	customer := tenant.StripeCustomerID
	if customer == "" {
		if customer, err = s.createCustomer(ctx, tenant); err != nil {
			return Upgrade{}, err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
		Customer:          stripe.String(customer),
		ClientReferenceID: stripe.String(tenantID),
		LineItems:         []*stripe.CheckoutSessionLineItemParams{{Price: stripe.String(tp.PriceID), Quantity: stripe.Int64(quantity)}},
		SuccessURL:        stripe.String(urls.Success),
		CancelURL:         stripe.String(urls.Cancel),
	}
	params.AddMetadata("tenant_id", tenantID)
	params.AddMetadata(MetaTopupPrice, tp.PriceID)
	params.AddMetadata(MetaTopupQuantity, strconv.FormatInt(quantity, 10))
	params.Context = cctx
	cs, err := s.stripe.CheckoutSessions.New(params)
	if err != nil {
		s.log.WarnContext(ctx, "stripe session not created", "to", "buy credits", "tenant_id", tenantID, "price", tp.PriceID, "err", err)
		return Upgrade{}, stripeError("start a Checkout", err)
	}
	if cs.URL == "" {
		return Upgrade{}, apperr.New(apperr.Upstream, "Stripe answered a Checkout session without a URL")
	}
	s.log.InfoContext(ctx, "top-up sent to Stripe Checkout", "tenant_id", tenantID, "price", tp.PriceID, "quantity", quantity, "session_id", cs.ID)
	return Upgrade{Kind: UpgradeCheckout, URL: cs.URL, SessionID: cs.ID}, nil
}
