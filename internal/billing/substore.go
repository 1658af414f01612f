package billing

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// subRow is a subscription as billing works on it: the stored copy
// (entitlements' table subscriptions, read and written through
// entitlements.Writes) with its items as billing parses them.
type subRow struct {
	entitlements.StoredSubscription
	// Items are all items (subscription_items); nil when not loaded.
	Items []itemView
}

// loadSub reads subscription id, locked for w's transaction; nil when none
// is stored.
func loadSub(ctx context.Context, w *entitlements.Writes, id string) (*subRow, error) {
	sub, items, err := w.LoadSubscription(ctx, id)
	if err != nil || sub == nil {
		return nil, err
	}
	r := &subRow{StoredSubscription: *sub, Items: make([]itemView, len(items))}
	for i, it := range items {
		r.Items[i] = itemView{ID: it.ID, PriceID: it.PriceID, ProductID: it.ProductID, Quantity: it.Quantity}
	}
	return r, nil
}

// saveSub writes the row and, when r.Items is not nil, replaces its items.
func saveSub(ctx context.Context, w *entitlements.Writes, id, customer string, r *subRow) error {
	var items []entitlements.SubscriptionItem
	if r.Items != nil {
		items = make([]entitlements.SubscriptionItem, len(r.Items))
		for i, it := range r.Items {
			items[i] = entitlements.SubscriptionItem{ID: it.ID, PriceID: it.PriceID, ProductID: it.ProductID, Quantity: it.Quantity}
		}
	}
	return w.SaveSubscription(ctx, id, customer, &r.StoredSubscription, items)
}

// terminal statuses: Stripe never brings such a subscription back.
func terminal(status string) bool {
	return status == string(stripe.SubscriptionStatusCanceled) || status == string(stripe.SubscriptionStatusIncompleteExpired)
}

// stale reports why an event older than the state it would overwrite must
// not apply, or "".
func stale(cur *subRow, created time.Time, firstEvent bool) string {
	if cur == nil || cur.LastEventAt == nil {
		return ""
	}
	if cur.LastEventAt.After(created) || (firstEvent && !cur.LastEventAt.Before(created)) {
		return fmt.Sprintf("stale: the subscription already has a newer event (created %s)", cur.LastEventAt.UTC().Format(time.RFC3339))
	}
	return ""
}

// setGrace starts the grace period when a subscription turns past_due and
// clears it when it leaves.
func (s *Service) setGrace(r *subRow) {
	if r.Status == string(stripe.SubscriptionStatusPastDue) {
		now := s.opts.Now()
		if r.PastDueSince == nil {
			r.PastDueSince = &now
		}
		if r.GraceEndsAt == nil {
			g := now.Add(s.opts.GracePeriod)
			r.GraceEndsAt = &g
		}
		return
	}
	r.PastDueSince, r.GraceEndsAt, r.NextPaymentAttempt = nil, nil, nil
	r.PaymentAttempts = 0
}

// effective is what of a subscription the entitlements depend on.
func effective(r *subRow) string {
	f := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	p := "-"
	if r.PriceID != nil {
		p = *r.PriceID
	}
	items := make([]string, 0, len(r.Items))
	for _, it := range r.Items {
		items = append(items, fmt.Sprintf("%s=%d", it.PriceID, it.Quantity))
	}
	return strings.Join([]string{r.Status, p, fmt.Sprint(r.HasPlanItem), f(r.StartDate), f(r.StripeCreated), fmt.Sprint(r.PlanQuantity), f(r.PeriodStart), f(r.PeriodEnd), fmt.Sprint(r.CancelAtPeriodEnd),
		f(r.TrialEnd), f(r.TrialWillEndAt), f(r.GraceEndsAt), fmt.Sprint(r.PaymentAttempts), f(r.NextPaymentAttempt),
		strings.Join(items, ",")}, "|")
}

func unixPtr(sec int64) *time.Time {
	if sec <= 0 {
		return nil
	}
	t := time.Unix(sec, 0).UTC()
	return &t
}
