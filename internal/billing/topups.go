package billing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// Top-ups (issue 26 point 4): billing decides that a Stripe payment bought
// mapped one-time prices; credits stores the grant, once per purchase. A
// Checkout Session in payment mode and the invoice it created are one
// purchase (session.invoice, or the same payment intent): both events, in
// any order and replayed any number of times, grant once.

// Credits is what billing asks of credits (*credits.Service).
type Credits interface {
	HasTopups(ctx context.Context) (bool, error)
	GetTopup(ctx context.Context, priceID string) (credits.Topup, error)
	GrantPurchaseTx(ctx context.Context, tx pgx.Tx, p credits.Purchase) (credits.PurchaseResult, error)
	// Stripe billing credits (creditgrants.go).
	MirrorStripeCreditTx(ctx context.Context, tx pgx.Tx, c credits.StripeCredit) (credits.StripeCreditResult, error)
	// Publish writes a tenant's grants where the limiter draws them.
	Publish(ctx context.Context, tenantID string) error
}

// Metadata a session Tollgate creates for a top-up carries, so that its
// line items need no call to Stripe.
const (
	MetaTopupPrice    = "topup_price_id"
	MetaTopupQuantity = "topup_quantity"
)

func isCheckoutPaid(typ string) bool {
	return typ == "checkout.session.completed" || typ == "checkout.session.async_payment_succeeded"
}

// metadataLines reads the top-up a Tollgate-made session names; nil when
// it names none.
func metadataLines(meta map[string]string) []credits.PurchaseLine {
	price := meta[MetaTopupPrice]
	if price == "" {
		return nil
	}
	q, err := strconv.ParseInt(meta[MetaTopupQuantity], 10, 64)
	if err != nil || q < 1 {
		q = 1
	}
	return []credits.PurchaseLine{{PriceID: price, Quantity: q}}
}

// prefetchTopup reads a payment-mode session's line items from Stripe
// (they are not in its event), unless its metadata names the top-up or no
// price is mapped to one.
func (s *Service) prefetchTopup(ctx context.Context, cs checkoutView) (prefetched, error) {
	var pre prefetched
	if metadataLines(cs.Metadata) != nil {
		return pre, nil
	}
	ok, err := s.opts.Credits.HasTopups(ctx)
	if err != nil || !ok {
		return pre, err
	}
	lines, err := s.listLineItems(ctx, cs.ID)
	if err != nil {
		return pre, err
	}
	pre.lineItems, pre.lineItemsRead = lines, true
	return pre, nil
}

// listLineItems is GET /v1/checkout/sessions/{id}/line_items, every page.
func (s *Service) listLineItems(ctx context.Context, id string) ([]credits.PurchaseLine, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.CheckoutSessionListLineItemsParams{Session: stripe.String(id)}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	it := s.stripe.CheckoutSessions.ListLineItems(params)
	out := []credits.PurchaseLine{}
	for it.Next() {
		li := it.LineItem()
		if li.Price != nil && li.Price.ID != "" {
			out = append(out, credits.PurchaseLine{PriceID: li.Price.ID, Quantity: li.Quantity})
		}
	}
	if err := it.Err(); err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			return out, nil // a session Stripe no longer has bought nothing we can see
		}
		return nil, fmt.Errorf("billing: read line items of %s from Stripe: %w", id, err)
	}
	return out, nil
}

// purchaseTenant is the tenant a payment is for: its customer's, else the
// session's client_reference_id or metadata.tenant_id, a tenant id or
// external id (a guest checkout has no customer). It never links a customer: a payment is not a
// subscription. "" with the reason when there is none.
func (s *Service) purchaseTenant(ctx context.Context, w *entitlements.Writes, customer string, named ...string) (string, string, error) {
	if customer != "" {
		t, err := w.TenantByCustomer(ctx, customer)
		if err != nil || t != "" {
			return t, "", err
		}
	}
	for _, tid := range named {
		if !ids.IsUUID(tid) {
			continue
		}
		_, ok, err := w.LockTenant(ctx, tid)
		if err != nil {
			return "", "", err
		}
		if ok {
			return tid, "", nil
		}
	}
	if customer != "" {
		return "", fmt.Sprintf("%s %s: no tenant has this stripe_customer_id", reasonUnknownCustomer, customer), nil
	}
	return "", "names no customer and no tenant (client_reference_id, metadata.tenant_id)", nil
}

// applyTopupCheckout grants what a paid payment-mode session bought.
func (s *Service) applyTopupCheckout(ctx context.Context, w *entitlements.Writes, ev storedEvent, cs checkoutView, pre prefetched) (outcome, error) {
	if s.opts.Credits == nil {
		return ignored("", "checkout session %s in payment mode: credits are not configured", cs.ID), nil
	}
	if cs.PaymentStatus != "paid" && cs.PaymentStatus != "no_payment_required" {
		return ignored("", "checkout session %s is %q; checkout.session.async_payment_succeeded grants it once paid", cs.ID, cs.PaymentStatus), nil
	}
	// The session may name its tenant by id or external id.
	ref, err := checkoutTenant(ctx, w, cs)
	if err != nil {
		return outcome{}, err
	}
	tid, why, err := s.purchaseTenant(ctx, w, cs.Customer, ref)
	if err != nil {
		return outcome{}, err
	}
	if tid == "" {
		return ignored("", "checkout session %s %s", cs.ID, why), nil
	}
	lines := metadataLines(cs.Metadata)
	switch {
	case lines != nil:
	case pre.lineItemsRead:
		lines = pre.lineItems
	case s.stripe == nil:
		return ignored(tid, "checkout session %s: its line items are not in the event; reading them needs STRIPE_SECRET_KEY (a session Tollgate creates names its top-up in metadata.%s)", cs.ID, MetaTopupPrice), nil
	default:
		return ignored(tid, "checkout session %s: no price is mapped to a top-up (PUT /admin/v1/topups/{price_id})", cs.ID), nil
	}
	res, err := s.opts.Credits.GrantPurchaseTx(ctx, w.Tx(), credits.Purchase{TenantID: tid,
		Keys: []string{cs.ID, cs.Invoice, cs.PaymentIntent}, Lines: lines, At: ev.Created})
	if err != nil {
		return outcome{}, err
	}
	return topupOutcome(tid, "checkout session "+cs.ID, res), nil
}

// applyTopupInvoice grants the top-up lines of a paid invoice (one billed
// on its own, or a one-time price added to a subscription's invoice).
// granted says whether the invoice is a purchase (now or before), so that
// one without a subscription is processed rather than ignored.
func (s *Service) applyTopupInvoice(ctx context.Context, w *entitlements.Writes, ev storedEvent, inv invoiceView) (outcome, bool, error) {
	if len(inv.Lines) == 0 {
		return outcome{}, false, nil
	}
	customer := inv.Customer
	if customer == "" {
		customer = ev.Customer
	}
	tid, why, err := s.purchaseTenant(ctx, w, customer)
	if err != nil {
		return outcome{}, false, err
	}
	if tid == "" {
		if inv.Subscription == "" {
			return ignored("", "invoice %s %s", inv.ID, why), true, nil
		}
		return outcome{}, false, nil // the subscription's handling says why
	}
	lines := make([]credits.PurchaseLine, len(inv.Lines))
	for i, l := range inv.Lines {
		lines[i] = credits.PurchaseLine{PriceID: l.Price, Quantity: l.Quantity}
	}
	res, err := s.opts.Credits.GrantPurchaseTx(ctx, w.Tx(), credits.Purchase{TenantID: tid,
		Keys: append([]string{inv.ID}, inv.PaymentIntents...), Lines: lines, At: ev.Created})
	if err != nil {
		return outcome{}, false, err
	}
	if len(res.Grants) == 0 && !res.Already {
		return outcome{}, false, nil
	}
	return topupOutcome(tid, "invoice "+inv.ID, res), true, nil
}

func topupOutcome(tid, what string, res credits.PurchaseResult) outcome {
	switch {
	case len(res.Grants) > 0, res.Already:
		// Processed: granted now, or by an earlier event of the purchase.
		return outcome{status: StatusProcessed, tenantID: tid}
	case len(res.Unmapped) > 0:
		return ignored(tid, "%s buys no price mapped to a top-up (%s)", what, strings.Join(res.Unmapped, ", "))
	default:
		return ignored(tid, "%s has no line items with a price", what)
	}
}
