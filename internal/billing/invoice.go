package billing

import (
	"context"

	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// applyInvoice: access follows the subscription's state only (issue 9
// point 5). invoice.payment_failed records the attempt and the next one (a
// subscription with payment_behavior pending_if_incomplete stays active
// while its invoice fails); invoice.paid ends grace only when it is the
// subscription's latest invoice; a renewal's invoice.created may move the
// period forward. With a secret key the subscription itself was read from
// Stripe and is applied first.
func (s *Service) applyInvoice(ctx context.Context, w *entitlements.Writes, ev storedEvent, inv invoiceView, pre prefetched) (outcome, error) {
	if ev.Type == "invoice.paid" && s.opts.Credits != nil {
		// Top-up lines first; the subscription, if any, is then handled
		// as any other paid invoice, and a grant makes the event processed.
		top, purchase, err := s.applyTopupInvoice(ctx, w, ev, inv)
		if err != nil {
			return outcome{}, err
		}
		if purchase && inv.Subscription == "" {
			return top, nil
		}
		if purchase && top.status == StatusProcessed {
			r, err := s.applySubscriptionInvoice(ctx, w, ev, inv, pre)
			if err != nil || r.status == StatusFailed {
				return r, err
			}
			return outcome{status: StatusProcessed, tenantID: top.tenantID}, nil
		}
	}
	return s.applySubscriptionInvoice(ctx, w, ev, inv, pre)
}

// applySubscriptionInvoice is applyInvoice for the invoice's subscription.
func (s *Service) applySubscriptionInvoice(ctx context.Context, w *entitlements.Writes, ev storedEvent, inv invoiceView, pre prefetched) (outcome, error) {
	if inv.Subscription == "" {
		return ignored("", "invoice %s belongs to no subscription", inv.ID), nil
	}
	if ev.Type == "invoice.created" && inv.BillingReason != string(stripe.InvoiceBillingReasonSubscriptionCycle) {
		return ignored("", "invoice.created with billing_reason %q changes nothing", inv.BillingReason), nil
	}
	if pre.sub != nil && pre.sub.ID == inv.Subscription {
		in := subInput{view: *pre.sub, eventID: ev.ID, eventType: ev.Type, created: ev.Created, fetchedAt: &pre.fetchedAt, raw: ev, fromInvoice: true}
		r, err := s.applySubscription(ctx, w, in)
		if err != nil || r.status == StatusFailed {
			return r, err
		}
	}
	cur, err := loadSub(ctx, w, inv.Subscription)
	if err != nil {
		return outcome{}, err
	}
	if cur == nil {
		return ignored("", "%s %s: its subscription event has not been applied yet; it runs again when it is", reasonUnknownSubscription, inv.Subscription), nil
	}
	res := outcome{status: StatusProcessed, tenantID: cur.TenantID}
	next := *cur
	switch ev.Type {
	case "invoice.created":
		// The renewal invoice's subscription line carries the new period;
		// it only ever moves the period forward, so order does not matter.
		start, end := unixPtr(inv.CycleStart), unixPtr(inv.CycleEnd)
		if start == nil || end == nil || (cur.PeriodStart != nil && !start.After(*cur.PeriodStart)) {
			return res, nil
		}
		next.PeriodStart, next.PeriodEnd = start, end
	case "invoice.paid":
		if terminal(cur.Status) {
			return ignored(cur.TenantID, "subscription %s is %s; a late invoice does not revive it", inv.Subscription, cur.Status), nil
		}
		if cur.LatestInvoiceID == nil || *cur.LatestInvoiceID != inv.ID {
			latest := "unknown"
			if cur.LatestInvoiceID != nil {
				latest = *cur.LatestInvoiceID
			}
			return ignored(cur.TenantID, "invoice %s is not subscription %s's latest invoice (%s); paying it says nothing about the subscription now",
				inv.ID, inv.Subscription, latest), nil
		}
		if why := stale(cur, ev.Created, false); why != "" && pre.sub == nil {
			return ignored(cur.TenantID, "%s", why), nil
		}
		// Paying the latest invoice is what makes Stripe set a past_due or
		// unpaid subscription active again.
		if cur.Status == string(stripe.SubscriptionStatusPastDue) || cur.Status == string(stripe.SubscriptionStatusUnpaid) {
			next.Status = string(stripe.SubscriptionStatusActive)
		}
		s.setGrace(&next)
	case "invoice.payment_failed":
		if terminal(cur.Status) {
			return ignored(cur.TenantID, "subscription %s is %s; a late invoice does not revive it", inv.Subscription, cur.Status), nil
		}
		// Attempts only grow, so delivery order does not matter here.
		if int(inv.AttemptCount) > next.PaymentAttempts {
			next.PaymentAttempts = int(inv.AttemptCount)
			next.NextPaymentAttempt = unixPtr(inv.NextPaymentAttempt)
		}
	}
	customer := inv.Customer
	if customer == "" {
		customer = ev.Customer
	}
	if customer == "" {
		if customer, err = w.SubscriptionCustomer(ctx, inv.Subscription); err != nil {
			return outcome{}, err
		}
	}
	next.Items = nil // unchanged
	if err := saveSub(ctx, w, inv.Subscription, customer, &next); err != nil {
		return outcome{}, err
	}
	next.Items = cur.Items
	if effective(cur) != effective(&next) {
		w.Changed(cur.TenantID)
	}
	return res, nil
}
