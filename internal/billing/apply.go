package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// reasonUnknownCustomer starts the ignored_reason of events whose customer
// is not linked yet; linking the customer re-runs them.
const reasonUnknownCustomer = "unknown customer"

// reasonUnknownSubscription starts the ignored_reason of subscription-scoped
// events (invoices) that arrived before their subscription's first event;
// applying that event re-runs them (issue 25).
const reasonUnknownSubscription = "unknown subscription"

// prefetched is what the worker read from Stripe before the transaction.
type prefetched struct {
	// features are the customer's active entitlement lookup keys, re-listed
	// (nil: not fetched).
	features []string
	// sub is the subscription as Stripe has it now, read at the pinned API
	// version because the event is only a notification (nil: not fetched).
	sub *subView
	// fetchedAt is when sub was read.
	fetchedAt time.Time
	// lineItems are a payment-mode session's, read from Stripe when
	// lineItemsRead (top-ups).
	lineItems     []credits.PurchaseLine
	lineItemsRead bool
	// creditPrices are the prices a credit grant covers, read from Stripe
	// when creditPricesRead (Stripe billing credits).
	creditPrices     []meteredPrice
	creditPricesRead bool
}

// prefetch calls Stripe before the transaction (never inside one). With a
// secret key, subscription, checkout and invoice events are notifications:
// the subscription they concern is read from Stripe at the pinned version,
// which also settles same-second ties and out-of-order delivery; an
// entitlement summary is re-listed. Without a key the payload is read
// version-tolerantly instead.
func (s *Service) prefetch(ctx context.Context, ev storedEvent) (prefetched, error) {
	var pre prefetched
	raw := ev.Object
	if isCheckoutPaid(ev.Type) && s.opts.Credits != nil && s.stripe != nil {
		if v, err := parseCheckout(raw); err == nil && v.Mode == "payment" {
			return s.prefetchTopup(ctx, v)
		}
	}
	if isCreditGrantEvent(ev.Type) {
		if s.opts.Credits == nil || s.stripe == nil {
			return pre, nil // apply says why
		}
		return s.prefetchCreditPrices(ctx, raw)
	}
	switch {
	case ev.Type == "entitlements.active_entitlement_summary.updated":
		sum, err := parseSummary(raw)
		if err != nil || sum.Customer == "" {
			return pre, nil // apply reports the bad payload
		}
		if s.stripe == nil {
			if sum.HasMore {
				return pre, errors.New("billing: entitlement summary has more entitlements than it carries; listing them needs STRIPE_SECRET_KEY")
			}
			return pre, nil
		}
		keys, err := s.listFeatures(ctx, sum.Customer)
		if err != nil {
			return pre, err
		}
		pre.features = keys
		return pre, nil
	case s.stripe == nil:
		return pre, nil
	}
	subID := ""
	switch {
	case strings.HasPrefix(ev.Type, "customer.subscription."):
		if v, err := parseSubscription(raw); err == nil {
			subID = v.ID
		}
	case ev.Type == "checkout.session.completed":
		if v, err := parseCheckout(raw); err == nil && v.Mode == "subscription" {
			subID = v.Subscription
		}
	case ev.Type == "invoice.paid" || ev.Type == "invoice.payment_failed" || ev.Type == "invoice.created":
		if v, err := parseInvoice(raw); err == nil {
			subID = v.Subscription
		}
	}
	if subID == "" {
		return pre, nil
	}
	at := s.opts.Now()
	v, err := s.fetchSubscription(ctx, subID)
	if err != nil {
		return pre, err
	}
	if v != nil {
		pre.sub, pre.fetchedAt = v, at
	}
	return pre, nil
}

// fetchSubscription reads a subscription (with its items) at the pinned
// API version. A subscription Stripe no longer has is nil: the payload is
// applied instead.
func (s *Service) fetchSubscription(ctx context.Context, id string) (*subView, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.SubscriptionParams{}
	params.Context = ctx
	got, err := s.stripe.Subscriptions.Get(id, params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			return nil, nil
		}
		return nil, fmt.Errorf("billing: read subscription %s from Stripe: %w", id, err)
	}
	if got.LastResponse == nil || len(got.LastResponse.RawJSON) == 0 {
		return nil, fmt.Errorf("billing: read subscription %s from Stripe: empty answer", id)
	}
	v, err := parseSubscription(got.LastResponse.RawJSON)
	if err != nil {
		return nil, fmt.Errorf("billing: read subscription %s from Stripe: %w", id, err)
	}
	return &v, nil
}

// apply changes our state for one event inside w's transaction.
func (s *Service) apply(ctx context.Context, w *entitlements.Writes, ev storedEvent, pre prefetched) (outcome, error) {
	raw := ev.Object
	switch {
	case strings.HasPrefix(ev.Type, "customer.subscription."):
		v, err := parseSubscription(raw)
		if err != nil {
			return ignored("", "%v", err), nil
		}
		in := subInput{view: v, eventID: ev.ID, eventType: ev.Type, created: ev.Created, raw: ev}
		if pre.sub != nil && pre.sub.ID == v.ID {
			in.view, in.fetchedAt = *pre.sub, &pre.fetchedAt
		}
		return s.applySubscription(ctx, w, in)
	case isCheckoutPaid(ev.Type):
		v, err := parseCheckout(raw)
		if err != nil {
			return ignored("", "%v", err), nil
		}
		if v.Mode == "payment" {
			return s.applyTopupCheckout(ctx, w, ev, v, pre)
		}
		if ev.Type != "checkout.session.completed" {
			return ignored("", "%s in mode %q changes nothing", ev.Type, v.Mode), nil
		}
		return s.applyCheckout(ctx, w, ev, v, pre)
	case ev.Type == "invoice.paid" || ev.Type == "invoice.payment_failed" || ev.Type == "invoice.created":
		v, err := parseInvoice(raw)
		if err != nil {
			return ignored("", "%v", err), nil
		}
		return s.applyInvoice(ctx, w, ev, v, pre)
	case ev.Type == "entitlements.active_entitlement_summary.updated":
		v, err := parseSummary(raw)
		if err != nil {
			return ignored("", "%v", err), nil
		}
		return s.applySummary(ctx, w, ev, v, pre)
	case ev.Type == "customer.deleted":
		return s.applyCustomerDeleted(ctx, w, ev)
	case isCreditGrantEvent(ev.Type):
		return s.applyCreditGrant(ctx, w, ev, pre)
	case ev.Type == "price.updated":
		var p struct {
			ID      string          `json:"id"`
			Product json.RawMessage `json:"product"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return ignored("", "data.object is not a price: %v", err), nil
		}
		// A price maps by itself or through its product.
		plan, err := catalogue.PlanForItem(ctx, w.Tx(), p.ID, expandable(p.Product))
		if err != nil {
			return outcome{}, err
		}
		addon, err := catalogue.AddonForItem(ctx, w.Tx(), p.ID, expandable(p.Product))
		if err != nil {
			return outcome{}, err
		}
		if plan == "" && addon == "" {
			return ignored("", "price %s is not mapped to a plan or an add-on (add it to a plan's stripe_price_ids, or PUT /admin/v1/addons/%s)", p.ID, p.ID), nil
		}
		return outcome{status: StatusProcessed}, nil
	case ev.Type == "product.updated":
		return outcome{status: StatusProcessed}, nil
	case ev.Thin:
		// Thin events carry only a reference; the metering side reads the
		// meter errors they announce. Stored and acknowledged here.
		return outcome{status: StatusProcessed}, nil
	default:
		return ignored("", "event type %s is not handled", ev.Type), nil
	}
}
