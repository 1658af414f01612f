package billing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"
)

// subRow is our copy of a subscription (table subscriptions, entitlements';
// billing still writes it here, a debt internal/ownership lists).
type subRow struct {
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
	// Items are all items (subscription_items); nil when not loaded.
	Items []itemView
}

func loadSub(ctx context.Context, tx pgx.Tx, id string) (*subRow, error) {
	var r subRow
	err := tx.QueryRow(ctx, `
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
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("billing: load subscription: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT item_id, price_id, coalesce(product_id, ''), quantity FROM subscription_items WHERE subscription_id = $1 ORDER BY item_id`, id)
	if err != nil {
		return nil, fmt.Errorf("billing: load subscription items: %w", err)
	}
	var it itemView
	r.Items = []itemView{}
	if _, err := pgx.ForEachRow(rows, []any{&it.ID, &it.PriceID, &it.ProductID, &it.Quantity}, func() error {
		r.Items = append(r.Items, it)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("billing: load subscription items: %w", err)
	}
	return &r, nil
}

// saveSub writes the row and, when r.Items is not nil, replaces its items.
func saveSub(ctx context.Context, tx pgx.Tx, id, customer string, r *subRow) error {
	_, err := tx.Exec(ctx, `
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
		return fmt.Errorf("billing: save subscription: %w", err)
	}
	if r.Items == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM subscription_items WHERE subscription_id = $1`, id); err != nil {
		return fmt.Errorf("billing: save subscription items: %w", err)
	}
	for _, it := range r.Items {
		if it.ID == "" || it.PriceID == "" {
			continue
		}
		if _, err := tx.Exec(ctx, `INSERT INTO subscription_items (subscription_id, item_id, price_id, product_id, quantity)
			VALUES ($1, $2, $3, nullif($4, ''), $5) ON CONFLICT DO NOTHING`, id, it.ID, it.PriceID, it.ProductID, max(it.Quantity, 0)); err != nil {
			return fmt.Errorf("billing: save subscription items: %w", err)
		}
	}
	return nil
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
