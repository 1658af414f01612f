package entitlements

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StoredSubscription is a row of subscriptions as billing writes it
// (Subscription is the part a snapshot reads). Billing decides what a
// Stripe event means; entitlements stores the result, in the transaction of
// the Writes that bumps the tenant's version, and computes snapshots from
// it.
type StoredSubscription struct {
	TenantID           string
	PriceID            *string // the plan item's price
	ItemID             *string // the plan item
	PlanQuantity       int64   // the plan item's quantity (seats)
	Status             string
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
	LastEventAt        *time.Time
	LastEventID        *string
	LatestInvoiceID    *string
	FetchedAt          *time.Time
	PauseCollection    *string
	StartDate          *time.Time // Stripe's start_date
	StripeCreated      *time.Time // Stripe's created
	// HasPlanItem is false for a subscription none of whose items maps to
	// a plan (an add-on billed on its own): it never carries the plan.
	HasPlanItem bool
}

// SubscriptionItem is one item of a stored subscription (table
// subscription_items).
type SubscriptionItem struct {
	ID        string
	PriceID   string
	ProductID string // "" when Stripe did not say
	Quantity  int64
}

// LoadSubscription reads subscription id, locked until the transaction
// ends, with its items ordered by id; nil when none is stored.
func (w *Writes) LoadSubscription(ctx context.Context, id string) (*StoredSubscription, []SubscriptionItem, error) {
	var r StoredSubscription
	err := w.tx.QueryRow(ctx, `
		SELECT tenant_id, stripe_price_id, stripe_item_id, plan_quantity, status, current_period_start, current_period_end,
			cancel_at_period_end, trial_end, trial_will_end_at, past_due_since, grace_ends_at,
			payment_attempts, next_payment_attempt, canceled_at, last_event_at, last_event_id, latest_invoice_id,
			fetched_at, pause_collection, start_date, stripe_created, has_plan_item
		FROM subscriptions WHERE id = $1 FOR UPDATE`, id).Scan(
		&r.TenantID, &r.PriceID, &r.ItemID, &r.PlanQuantity, &r.Status, &r.PeriodStart, &r.PeriodEnd,
		&r.CancelAtPeriodEnd, &r.TrialEnd, &r.TrialWillEndAt, &r.PastDueSince, &r.GraceEndsAt,
		&r.PaymentAttempts, &r.NextPaymentAttempt, &r.CanceledAt, &r.LastEventAt, &r.LastEventID, &r.LatestInvoiceID,
		&r.FetchedAt, &r.PauseCollection, &r.StartDate, &r.StripeCreated, &r.HasPlanItem)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("entitlements: load subscription: %w", err)
	}
	rows, err := w.tx.Query(ctx, `SELECT item_id, price_id, coalesce(product_id, ''), quantity FROM subscription_items WHERE subscription_id = $1 ORDER BY item_id`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("entitlements: load subscription items: %w", err)
	}
	var it SubscriptionItem
	items := []SubscriptionItem{}
	if _, err := pgx.ForEachRow(rows, []any{&it.ID, &it.PriceID, &it.ProductID, &it.Quantity}, func() error {
		items = append(items, it)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("entitlements: load subscription items: %w", err)
	}
	return &r, items, nil
}

// SaveSubscription writes subscription id of customer and, when items is
// not nil, replaces its items (an item without id or price is skipped).
// It does not mark the tenant changed: the caller, who knows whether what
// the snapshot depends on moved, calls Changed.
func (w *Writes) SaveSubscription(ctx context.Context, id, customer string, r *StoredSubscription, items []SubscriptionItem) error {
	_, err := w.tx.Exec(ctx, `
		INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status,
			current_period_start, current_period_end, cancel_at_period_end, trial_end, trial_will_end_at,
			past_due_since, grace_ends_at, payment_attempts, next_payment_attempt, canceled_at, last_event_at,
			plan_quantity, last_event_id, latest_invoice_id, fetched_at, pause_collection, start_date, stripe_created, has_plan_item)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)
		ON CONFLICT (id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, stripe_customer_id = EXCLUDED.stripe_customer_id,
			stripe_price_id = EXCLUDED.stripe_price_id, stripe_item_id = EXCLUDED.stripe_item_id, status = EXCLUDED.status,
			current_period_start = EXCLUDED.current_period_start, current_period_end = EXCLUDED.current_period_end,
			cancel_at_period_end = EXCLUDED.cancel_at_period_end, trial_end = EXCLUDED.trial_end,
			trial_will_end_at = EXCLUDED.trial_will_end_at, past_due_since = EXCLUDED.past_due_since,
			grace_ends_at = EXCLUDED.grace_ends_at, payment_attempts = EXCLUDED.payment_attempts,
			next_payment_attempt = EXCLUDED.next_payment_attempt, canceled_at = EXCLUDED.canceled_at,
			last_event_at = EXCLUDED.last_event_at, plan_quantity = EXCLUDED.plan_quantity,
			last_event_id = EXCLUDED.last_event_id, latest_invoice_id = EXCLUDED.latest_invoice_id,
			fetched_at = EXCLUDED.fetched_at, pause_collection = EXCLUDED.pause_collection,
			start_date = EXCLUDED.start_date, stripe_created = EXCLUDED.stripe_created, has_plan_item = EXCLUDED.has_plan_item,
			updated_at = now()`,
		id, r.TenantID, customer, r.PriceID, r.ItemID, r.Status, r.PeriodStart, r.PeriodEnd, r.CancelAtPeriodEnd,
		r.TrialEnd, r.TrialWillEndAt, r.PastDueSince, r.GraceEndsAt, r.PaymentAttempts, r.NextPaymentAttempt,
		r.CanceledAt, r.LastEventAt, max(r.PlanQuantity, 0), r.LastEventID, r.LatestInvoiceID, r.FetchedAt, r.PauseCollection,
		r.StartDate, r.StripeCreated, r.HasPlanItem)
	if err != nil {
		return fmt.Errorf("entitlements: save subscription: %w", err)
	}
	if items == nil {
		return nil
	}
	if _, err := w.tx.Exec(ctx, `DELETE FROM subscription_items WHERE subscription_id = $1`, id); err != nil {
		return fmt.Errorf("entitlements: save subscription items: %w", err)
	}
	for _, it := range items {
		if it.ID == "" || it.PriceID == "" {
			continue
		}
		if _, err := w.tx.Exec(ctx, `INSERT INTO subscription_items (subscription_id, item_id, price_id, product_id, quantity)
			VALUES ($1, $2, $3, nullif($4, ''), $5) ON CONFLICT DO NOTHING`, id, it.ID, it.PriceID, it.ProductID, max(it.Quantity, 0)); err != nil {
			return fmt.Errorf("entitlements: save subscription items: %w", err)
		}
	}
	return nil
}

// SubscriptionCustomer is the Stripe customer of stored subscription id.
func (w *Writes) SubscriptionCustomer(ctx context.Context, id string) (string, error) {
	var customer string
	if err := w.tx.QueryRow(ctx, `SELECT stripe_customer_id FROM subscriptions WHERE id = $1`, id).Scan(&customer); err != nil {
		return "", fmt.Errorf("entitlements: customer of subscription %s: %w", id, err)
	}
	return customer, nil
}

// CancelCustomerSubscriptions marks every subscription of customer that is
// not over yet canceled at at, as of a Stripe event created at eventAt
// (deleting a customer cancels its subscriptions; Stripe's own events for
// them may come later, or never).
func (w *Writes) CancelCustomerSubscriptions(ctx context.Context, customer string, at, eventAt time.Time) error {
	_, err := w.tx.Exec(ctx, `UPDATE subscriptions SET status = 'canceled', canceled_at = COALESCE(canceled_at, $2),
			past_due_since = NULL, grace_ends_at = NULL, last_event_at = GREATEST(last_event_at, $3), updated_at = now()
		WHERE stripe_customer_id = $1 AND status NOT IN ('canceled', 'incomplete_expired')`, customer, at, eventAt)
	if err != nil {
		return fmt.Errorf("entitlements: cancel subscriptions: %w", err)
	}
	return nil
}

// CustomerLive says whether customer has a stored subscription that is not
// over (canceled or incomplete_expired).
func (w *Writes) CustomerLive(ctx context.Context, customer string) (bool, error) {
	var ok bool
	err := w.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM subscriptions WHERE stripe_customer_id = $1
		AND status NOT IN ('canceled', 'incomplete_expired'))`, customer).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("entitlements: customer live: %w", err)
	}
	return ok, nil
}

// SetSubscriptionPrice records a plan change Stripe accepted, as its
// webhook would: subscription id's plan item (itemID, "" for the one
// stored) now has price, as of sent.
func (w *Writes) SetSubscriptionPrice(ctx context.Context, id, itemID, price string, sent time.Time) error {
	if _, err := w.tx.Exec(ctx, `UPDATE subscriptions SET stripe_price_id = $2, updated_at = now(),
			stripe_item_id = COALESCE(NULLIF($4, ''), stripe_item_id),
			last_event_at = GREATEST(COALESCE(last_event_at, $3), $3) WHERE id = $1`, id, price, sent, itemID); err != nil {
		return fmt.Errorf("entitlements: set subscription price: %w", err)
	}
	if _, err := w.tx.Exec(ctx, `UPDATE subscription_items SET price_id = $3 WHERE subscription_id = $1 AND item_id = $2`,
		id, itemID, price); err != nil {
		return fmt.Errorf("entitlements: set item price: %w", err)
	}
	return nil
}

// StripeFeatures are the Stripe entitlement features stored for a tenant.
func (w *Writes) StripeFeatures(ctx context.Context, tenantID string) ([]string, error) {
	var features []string
	if err := w.tx.QueryRow(ctx, `SELECT stripe_features FROM tenants WHERE id = $1`, tenantID).Scan(&features); err != nil {
		return nil, fmt.Errorf("entitlements: features of %s: %w", tenantID, err)
	}
	return features, nil
}

// TenantsPastGrace are the tenants with a past_due subscription whose grace
// period ended by now and that have had no entitlement version since it
// ended: each ending is to be refreshed once, so that the limiter moves the
// tenant to the default plan.
func (s *Service) TenantsPastGrace(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.db.Query(ctx, `
		SELECT DISTINCT s.tenant_id::text FROM subscriptions s
		WHERE s.status = 'past_due' AND s.grace_ends_at <= $1
		  AND NOT EXISTS (SELECT 1 FROM entitlement_versions v WHERE v.tenant_id = s.tenant_id AND v.created_at >= s.grace_ends_at)`, now)
	if err != nil {
		return nil, fmt.Errorf("entitlements: ended grace periods: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("entitlements: ended grace periods: %w", err)
	}
	return out, nil
}

// LinkedTenants are the ids of the tenants linked to a Stripe customer, in
// id order.
func (s *Service) LinkedTenants(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT id::text FROM tenants WHERE stripe_customer_id IS NOT NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("entitlements: linked tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("entitlements: linked tenants: %w", err)
	}
	return out, nil
}

// CurrentPlanItem is the status of a tenant's current subscription (the
// view current_subscriptions) and its plan item's price and product ("" when
// unknown); ok is false when the tenant has none.
func (w *Writes) CurrentPlanItem(ctx context.Context, tenantID string) (status, price, product string, ok bool, err error) {
	err = w.tx.QueryRow(ctx, `SELECT status, coalesce(stripe_price_id, ''),
		coalesce((SELECT i.product_id FROM subscription_items i WHERE i.subscription_id = s.id AND i.item_id = s.stripe_item_id), '')
		FROM current_subscriptions s WHERE s.tenant_id = $1`, tenantID).Scan(&status, &price, &product)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", "", false, nil
	}
	if err != nil {
		return "", "", "", false, fmt.Errorf("entitlements: current subscription: %w", err)
	}
	return status, price, product, true, nil
}

// CustomerItemPrices are the prices on the items of customer's stored
// subscriptions that are not over (the ones a Stripe credit grant of
// price_type "metered" may apply to on its invoices), in order.
func (s *Service) CustomerItemPrices(ctx context.Context, customer string) ([]string, error) {
	rows, err := s.db.Query(ctx, `
SELECT DISTINCT i.price_id FROM subscription_items i JOIN subscriptions s ON s.id = i.subscription_id
 WHERE s.stripe_customer_id = $1 AND s.status NOT IN ('canceled', 'incomplete_expired') ORDER BY 1`, customer)
	if err != nil {
		return nil, fmt.Errorf("entitlements: prices of %s: %w", customer, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("entitlements: prices of %s: %w", customer, err)
	}
	return out, nil
}
