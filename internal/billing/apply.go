package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/ids"
)

// reasonUnknownCustomer starts the ignored_reason of events whose customer
// is not linked yet; linking the customer re-runs them.
const reasonUnknownCustomer = "unknown customer"

// prefetched is what the worker read from Stripe before the transaction.
type prefetched struct {
	// features are the customer's active entitlement lookup keys, re-listed
	// because the event's summary had more than it carried (nil: not fetched).
	features []string
}

// prefetch calls Stripe when the payload is not enough. Never inside a tx.
func (s *Service) prefetch(ctx context.Context, ev storedEvent) (prefetched, error) {
	var pre prefetched
	if ev.Type != "entitlements.active_entitlement_summary.updated" {
		return pre, nil
	}
	var sum stripe.EntitlementsActiveEntitlementSummary
	if err := json.Unmarshal(ev.Event.Data.Raw, &sum); err != nil {
		return pre, nil // apply reports the bad payload
	}
	if sum.Entitlements == nil || !sum.Entitlements.HasMore || sum.Customer == "" {
		return pre, nil
	}
	if s.stripe == nil {
		return pre, errors.New("billing: entitlement summary has more entitlements than it carries; listing them needs STRIPE_SECRET_KEY")
	}
	keys, err := s.listFeatures(ctx, sum.Customer)
	if err != nil {
		return pre, err
	}
	pre.features = keys
	return pre, nil
}

// apply changes our state for one event inside tx.
func (s *Service) apply(ctx context.Context, tx pgx.Tx, ev storedEvent, pre prefetched) (outcome, error) {
	if ev.Event.APIVersion != stripe.APIVersion {
		return ignored("", "api_version %q is not %q (the version stripe-go v79 decodes); not processed", ev.Event.APIVersion, stripe.APIVersion), nil
	}
	raw := ev.Event.Data.Raw
	switch ev.Type {
	case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted",
		"customer.subscription.paused", "customer.subscription.resumed", "customer.subscription.trial_will_end":
		var sub stripe.Subscription
		if err := json.Unmarshal(raw, &sub); err != nil {
			return ignored("", "data.object is not a subscription: %v", err), nil
		}
		return s.applySubscription(ctx, tx, ev, &sub)
	case "checkout.session.completed":
		var cs stripe.CheckoutSession
		if err := json.Unmarshal(raw, &cs); err != nil {
			return ignored("", "data.object is not a checkout session: %v", err), nil
		}
		return s.applyCheckout(ctx, tx, ev, &cs)
	case "invoice.paid", "invoice.payment_failed", "invoice.created":
		var inv stripe.Invoice
		if err := json.Unmarshal(raw, &inv); err != nil {
			return ignored("", "data.object is not an invoice: %v", err), nil
		}
		return s.applyInvoice(ctx, tx, ev, &inv)
	case "entitlements.active_entitlement_summary.updated":
		var sum stripe.EntitlementsActiveEntitlementSummary
		if err := json.Unmarshal(raw, &sum); err != nil {
			return ignored("", "data.object is not an entitlement summary: %v", err), nil
		}
		return s.applySummary(ctx, tx, ev, &sum, pre)
	case "customer.deleted":
		return s.applyCustomerDeleted(ctx, tx, ev)
	case "price.updated":
		var p stripe.Price
		if err := json.Unmarshal(raw, &p); err != nil {
			return ignored("", "data.object is not a price: %v", err), nil
		}
		plan, err := planForPrice(ctx, tx, p.ID)
		if err != nil {
			return outcome{}, err
		}
		if plan == "" {
			return ignored("", "price %s is not mapped to a plan (set stripe_price_id on a plan)", p.ID), nil
		}
		return outcome{status: StatusProcessed}, nil
	case "product.updated":
		return outcome{status: StatusProcessed}, nil
	default:
		return ignored("", "event type %s is not handled", ev.Type), nil
	}
}

// subRow is our copy of a subscription.
type subRow struct {
	TenantID           string
	PriceID            *string
	ItemID             *string
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
}

func loadSub(ctx context.Context, tx pgx.Tx, id string) (*subRow, error) {
	var r subRow
	err := tx.QueryRow(ctx, `
		SELECT tenant_id, stripe_price_id, stripe_item_id, status, current_period_start, current_period_end,
			cancel_at_period_end, trial_end, trial_will_end_at, past_due_since, grace_ends_at,
			payment_attempts, next_payment_attempt, canceled_at, last_event_at
		FROM subscriptions WHERE id = $1 FOR UPDATE`, id).Scan(
		&r.TenantID, &r.PriceID, &r.ItemID, &r.Status, &r.PeriodStart, &r.PeriodEnd,
		&r.CancelAtPeriodEnd, &r.TrialEnd, &r.TrialWillEndAt, &r.PastDueSince, &r.GraceEndsAt,
		&r.PaymentAttempts, &r.NextPaymentAttempt, &r.CanceledAt, &r.LastEventAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("billing: load subscription: %w", err)
	}
	return &r, nil
}

func saveSub(ctx context.Context, tx pgx.Tx, id, customer string, r *subRow) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, stripe_price_id, stripe_item_id, status,
			current_period_start, current_period_end, cancel_at_period_end, trial_end, trial_will_end_at,
			past_due_since, grace_ends_at, payment_attempts, next_payment_attempt, canceled_at, last_event_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
		ON CONFLICT (id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id, stripe_customer_id = EXCLUDED.stripe_customer_id,
			stripe_price_id = EXCLUDED.stripe_price_id, stripe_item_id = EXCLUDED.stripe_item_id, status = EXCLUDED.status,
			current_period_start = EXCLUDED.current_period_start, current_period_end = EXCLUDED.current_period_end,
			cancel_at_period_end = EXCLUDED.cancel_at_period_end, trial_end = EXCLUDED.trial_end,
			trial_will_end_at = EXCLUDED.trial_will_end_at, past_due_since = EXCLUDED.past_due_since,
			grace_ends_at = EXCLUDED.grace_ends_at, payment_attempts = EXCLUDED.payment_attempts,
			next_payment_attempt = EXCLUDED.next_payment_attempt, canceled_at = EXCLUDED.canceled_at,
			last_event_at = EXCLUDED.last_event_at, updated_at = now()`,
		id, r.TenantID, customer, r.PriceID, r.ItemID, r.Status, r.PeriodStart, r.PeriodEnd, r.CancelAtPeriodEnd,
		r.TrialEnd, r.TrialWillEndAt, r.PastDueSince, r.GraceEndsAt, r.PaymentAttempts, r.NextPaymentAttempt,
		r.CanceledAt, r.LastEventAt)
	if err != nil {
		return fmt.Errorf("billing: save subscription: %w", err)
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

// resolveTenant finds the tenant of a Stripe customer: by
// tenants.stripe_customer_id, else by metadata.tenant_id (which links the
// customer to a tenant that has none yet).
func resolveTenant(ctx context.Context, tx pgx.Tx, customer string, metadata map[string]string) (string, error) {
	if customer == "" {
		return "", nil
	}
	var id string
	err := tx.QueryRow(ctx, `SELECT id FROM tenants WHERE stripe_customer_id = $1`, customer).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("billing: tenant by customer: %w", err)
	}
	tid := metadata["tenant_id"]
	if !ids.IsUUID(tid) {
		return "", nil
	}
	err = tx.QueryRow(ctx, `UPDATE tenants SET stripe_customer_id = $2, updated_at = now()
		WHERE id = $1 AND stripe_customer_id IS NULL RETURNING id`, tid, customer).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("billing: link customer by metadata: %w", err)
	}
	return id, nil
}

func planForPrice(ctx context.Context, tx pgx.Tx, priceID string) (string, error) {
	if priceID == "" {
		return "", nil
	}
	var key string
	err := tx.QueryRow(ctx, `SELECT key FROM plans WHERE stripe_price_id = $1`, priceID).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("billing: plan by price: %w", err)
	}
	return key, nil
}

func (s *Service) applySubscription(ctx context.Context, tx pgx.Tx, ev storedEvent, sub *stripe.Subscription) (outcome, error) {
	if sub.ID == "" {
		return ignored("", "data.object has no subscription id"), nil
	}
	customer := ""
	if sub.Customer != nil {
		customer = sub.Customer.ID
	}
	tenant, err := resolveTenant(ctx, tx, customer, sub.Metadata)
	if err != nil {
		return outcome{}, err
	}
	if tenant == "" {
		return ignored("", "%s %s: no tenant has this stripe_customer_id and metadata.tenant_id names none", reasonUnknownCustomer, customer), nil
	}
	cur, err := loadSub(ctx, tx, sub.ID)
	if err != nil {
		return outcome{}, err
	}
	created := ev.Created
	if why := stale(cur, created, false); why != "" {
		return ignored(tenant, "%s", why), nil
	}
	// A created event in the same second as an applied one is older than
	// it, unless it changes nothing (a replay of itself).
	sameSecondCreated := ev.Type == "customer.subscription.created" && stale(cur, created, true) != ""
	status := string(sub.Status)
	if cur != nil && terminal(cur.Status) && !terminal(status) {
		return ignored(tenant, "subscription %s is %s; a late event does not revive it", sub.ID, cur.Status), nil
	}
	var priceID, itemID string
	if sub.Items != nil && len(sub.Items.Data) > 0 && sub.Items.Data[0] != nil {
		itemID = sub.Items.Data[0].ID
		if sub.Items.Data[0].Price != nil {
			priceID = sub.Items.Data[0].Price.ID
		}
	}
	plan, err := planForPrice(ctx, tx, priceID)
	if err != nil {
		return outcome{}, err
	}
	if plan == "" && !terminal(status) {
		return ignored(tenant, "price %q of subscription %s is not mapped to a plan (set stripe_price_id on a plan)", priceID, sub.ID), nil
	}

	next := subRow{TenantID: tenant, Status: status, CancelAtPeriodEnd: sub.CancelAtPeriodEnd, LastEventAt: &created}
	if cur != nil {
		next = *cur
		next.TenantID, next.Status, next.CancelAtPeriodEnd, next.LastEventAt = tenant, status, sub.CancelAtPeriodEnd, &created
	}
	next.PriceID, next.ItemID = nullable(priceID), nullable(itemID)
	if sub.CurrentPeriodStart > 0 && sub.CurrentPeriodEnd > sub.CurrentPeriodStart {
		next.PeriodStart, next.PeriodEnd = unixPtr(sub.CurrentPeriodStart), unixPtr(sub.CurrentPeriodEnd)
	}
	next.TrialEnd = unixPtr(sub.TrialEnd)
	if ev.Type == "customer.subscription.trial_will_end" {
		next.TrialWillEndAt = next.TrialEnd
		if next.TrialWillEndAt == nil {
			next.TrialWillEndAt = unixPtr(ev.Event.Created)
		}
	}
	s.setGrace(&next)
	if terminal(status) && next.CanceledAt == nil {
		next.CanceledAt = unixPtr(sub.CanceledAt)
		if next.CanceledAt == nil {
			t := s.opts.Now()
			next.CanceledAt = &t
		}
	}
	if sameSecondCreated {
		var curPlan string
		if err := tx.QueryRow(ctx, `SELECT plan_key FROM tenants WHERE id = $1`, tenant).Scan(&curPlan); err != nil {
			return outcome{}, fmt.Errorf("billing: load plan: %w", err)
		}
		if effective(cur) != effective(&next) || (plan != "" && !terminal(status) && plan != curPlan) {
			return ignored(tenant, "%s", stale(cur, created, true)), nil
		}
		return outcome{status: StatusProcessed, tenantID: tenant}, nil
	}
	if err := saveSub(ctx, tx, sub.ID, customer, &next); err != nil {
		return outcome{}, err
	}
	planChanged := false
	if plan != "" && !terminal(status) {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET plan_key = $2, updated_at = now() WHERE id = $1 AND plan_key <> $2`, tenant, plan)
		if err != nil {
			return outcome{}, fmt.Errorf("billing: set plan: %w", err)
		}
		planChanged = tag.RowsAffected() == 1
	}
	res := outcome{status: StatusProcessed, tenantID: tenant, reasonText: "stripe: " + ev.Type + " " + ev.ID}
	// The webhook of a change we made ourselves (a plan change through
	// Stripe) finds everything as it is: no new version, no flapping.
	if planChanged || cur == nil || effective(cur) != effective(&next) {
		res.bump = []string{tenant}
	}
	return res, nil
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
	return strings.Join([]string{r.Status, p, f(r.PeriodStart), f(r.PeriodEnd), fmt.Sprint(r.CancelAtPeriodEnd),
		f(r.TrialEnd), f(r.TrialWillEndAt), f(r.GraceEndsAt), fmt.Sprint(r.PaymentAttempts), f(r.NextPaymentAttempt)}, "|")
}

func (s *Service) applyInvoice(ctx context.Context, tx pgx.Tx, ev storedEvent, inv *stripe.Invoice) (outcome, error) {
	if inv.Subscription == nil || inv.Subscription.ID == "" {
		return ignored("", "invoice %s belongs to no subscription", inv.ID), nil
	}
	if ev.Type == "invoice.created" && inv.BillingReason != stripe.InvoiceBillingReasonSubscriptionCycle {
		return ignored("", "invoice.created with billing_reason %q changes nothing", inv.BillingReason), nil
	}
	cur, err := loadSub(ctx, tx, inv.Subscription.ID)
	if err != nil {
		return outcome{}, err
	}
	if cur == nil {
		return ignored("", "subscription %s is unknown here (its subscription event has not been applied)", inv.Subscription.ID), nil
	}
	res := outcome{status: StatusProcessed, tenantID: cur.TenantID, reasonText: "stripe: " + ev.Type + " " + ev.ID}
	next := *cur
	switch ev.Type {
	case "invoice.created":
		// The renewal invoice's subscription line carries the new period;
		// it only ever moves the period forward, so order does not matter.
		start, end := cyclePeriod(inv)
		if start == nil || (cur.PeriodStart != nil && !start.After(*cur.PeriodStart)) {
			return res, nil
		}
		next.PeriodStart, next.PeriodEnd = start, end
	case "invoice.paid":
		if why := stale(cur, ev.Created, false); why != "" {
			return ignored(cur.TenantID, "%s", why), nil
		}
		if terminal(cur.Status) {
			return ignored(cur.TenantID, "subscription %s is %s; a late invoice does not revive it", inv.Subscription.ID, cur.Status), nil
		}
		created := ev.Created
		next.LastEventAt = &created
		if cur.Status == string(stripe.SubscriptionStatusPastDue) || cur.Status == string(stripe.SubscriptionStatusUnpaid) {
			next.Status = string(stripe.SubscriptionStatusActive)
		}
		s.setGrace(&next)
	case "invoice.payment_failed":
		if why := stale(cur, ev.Created, false); why != "" {
			return ignored(cur.TenantID, "%s", why), nil
		}
		if terminal(cur.Status) {
			return ignored(cur.TenantID, "subscription %s is %s; a late invoice does not revive it", inv.Subscription.ID, cur.Status), nil
		}
		created := ev.Created
		next.LastEventAt = &created
		switch cur.Status {
		case string(stripe.SubscriptionStatusActive), string(stripe.SubscriptionStatusTrialing):
			next.Status = string(stripe.SubscriptionStatusPastDue)
		}
		s.setGrace(&next)
		if int(inv.AttemptCount) > next.PaymentAttempts {
			next.PaymentAttempts = int(inv.AttemptCount)
		}
		next.NextPaymentAttempt = unixPtr(inv.NextPaymentAttempt)
	}
	customer := ""
	if inv.Customer != nil {
		customer = inv.Customer.ID
	}
	if customer == "" {
		if err := tx.QueryRow(ctx, `SELECT stripe_customer_id FROM subscriptions WHERE id = $1`, inv.Subscription.ID).Scan(&customer); err != nil {
			return outcome{}, fmt.Errorf("billing: subscription customer: %w", err)
		}
	}
	if err := saveSub(ctx, tx, inv.Subscription.ID, customer, &next); err != nil {
		return outcome{}, err
	}
	if effective(cur) != effective(&next) {
		res.bump = []string{cur.TenantID}
	}
	return res, nil
}

// cyclePeriod is the period of a renewal invoice's subscription line.
func cyclePeriod(inv *stripe.Invoice) (*time.Time, *time.Time) {
	if inv.Lines == nil {
		return nil, nil
	}
	for _, l := range inv.Lines.Data {
		if l == nil || l.Period == nil || l.Period.End <= l.Period.Start {
			continue
		}
		if l.Type == stripe.InvoiceLineItemTypeSubscription || l.Type == "" {
			return unixPtr(l.Period.Start), unixPtr(l.Period.End)
		}
	}
	return nil, nil
}

func (s *Service) applyCheckout(ctx context.Context, tx pgx.Tx, ev storedEvent, cs *stripe.CheckoutSession) (outcome, error) {
	if cs.Mode != stripe.CheckoutSessionModeSubscription {
		return ignored("", "checkout session in mode %q does not start a subscription", cs.Mode), nil
	}
	customer := ""
	if cs.Customer != nil {
		customer = cs.Customer.ID
	}
	if customer == "" {
		return ignored("", "checkout session %s has no customer", cs.ID), nil
	}
	tid := cs.ClientReferenceID
	if !ids.IsUUID(tid) {
		tid = cs.Metadata["tenant_id"]
	}
	if !ids.IsUUID(tid) {
		return ignored("", "checkout session %s names no tenant (client_reference_id %q, metadata.tenant_id %q)", cs.ID, cs.ClientReferenceID, cs.Metadata["tenant_id"]), nil
	}
	var linked *string
	err := tx.QueryRow(ctx, `SELECT stripe_customer_id FROM tenants WHERE id = $1 FOR UPDATE`, tid).Scan(&linked)
	if errors.Is(err, pgx.ErrNoRows) {
		return ignored("", "checkout session %s names tenant %s, which does not exist", cs.ID, tid), nil
	}
	if err != nil {
		return outcome{}, fmt.Errorf("billing: load tenant: %w", err)
	}
	if linked != nil && *linked == customer {
		return outcome{status: StatusProcessed, tenantID: tid}, nil
	}
	if linked != nil {
		return ignored(tid, "tenant %s is already linked to customer %s, not %s", tid, *linked, customer), nil
	}
	var other string
	err = tx.QueryRow(ctx, `SELECT id FROM tenants WHERE stripe_customer_id = $1`, customer).Scan(&other)
	if err == nil {
		return ignored(tid, "customer %s is already linked to tenant %s", customer, other), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return outcome{}, fmt.Errorf("billing: tenant by customer: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE tenants SET stripe_customer_id = $2, updated_at = now() WHERE id = $1`, tid, customer); err != nil {
		return outcome{}, fmt.Errorf("billing: link customer: %w", err)
	}
	// Subscription events often arrive before the checkout completion; those
	// were ignored for an unknown customer and now run again.
	if err := s.requeueUnknown(ctx, tx, customer); err != nil {
		return outcome{}, err
	}
	return outcome{status: StatusProcessed, tenantID: tid, bump: []string{tid}, reasonText: "stripe: customer linked " + ev.ID}, nil
}

func (s *Service) requeueUnknown(ctx context.Context, tx pgx.Tx, customer string) error {
	rows, err := tx.Query(ctx, `
		UPDATE stripe_events SET status = 'pending', ignored_reason = NULL
		WHERE stripe_customer_id = $1 AND status = 'ignored' AND ignored_reason LIKE $2
		RETURNING id`, customer, reasonUnknownCustomer+"%")
	if err != nil {
		return fmt.Errorf("billing: requeue events: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("billing: requeue events: %w", err)
	}
	for _, id := range ids {
		if _, err := s.jobs.InsertTx(ctx, tx, EventArgs{EventID: id, CustomerID: customer}, nil); err != nil {
			return fmt.Errorf("billing: requeue event: %w", err)
		}
	}
	return nil
}

func (s *Service) applySummary(ctx context.Context, tx pgx.Tx, ev storedEvent, sum *stripe.EntitlementsActiveEntitlementSummary, pre prefetched) (outcome, error) {
	tenant, err := resolveTenant(ctx, tx, sum.Customer, nil)
	if err != nil {
		return outcome{}, err
	}
	if tenant == "" {
		return ignored("", "%s %s: no tenant has this stripe_customer_id", reasonUnknownCustomer, sum.Customer), nil
	}
	if pre.features == nil {
		// Only a summary complete in itself can be stale: a re-listed one
		// is the state now.
		var newer bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stripe_events WHERE stripe_customer_id = $1 AND type = $2
			AND status = 'processed' AND event_created > $3 AND id <> $4)`, sum.Customer, ev.Type, ev.Created, ev.ID).Scan(&newer)
		if err != nil {
			return outcome{}, fmt.Errorf("billing: newer summary: %w", err)
		}
		if newer {
			return ignored(tenant, "stale: a newer entitlement summary was already applied"), nil
		}
	}
	keys := pre.features
	if keys == nil {
		keys = []string{}
		if sum.Entitlements != nil {
			for _, e := range sum.Entitlements.Data {
				if e != nil && e.LookupKey != "" {
					keys = append(keys, e.LookupKey)
				}
			}
		}
	}
	keys = normalizeKeys(keys)
	changed, err := setFeatures(ctx, tx, tenant, keys)
	if err != nil {
		return outcome{}, err
	}
	res := outcome{status: StatusProcessed, tenantID: tenant, reasonText: "stripe: entitlements " + ev.ID}
	if changed {
		res.bump = []string{tenant}
	}
	return res, nil
}

func normalizeKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

func setFeatures(ctx context.Context, tx pgx.Tx, tenant string, keys []string) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE tenants SET stripe_features = $2, updated_at = now()
		WHERE id = $1 AND stripe_features IS DISTINCT FROM $2`, tenant, keys)
	if err != nil {
		return false, fmt.Errorf("billing: set features: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (s *Service) applyCustomerDeleted(ctx context.Context, tx pgx.Tx, ev storedEvent) (outcome, error) {
	customer := ev.Customer
	var tenant string
	err := tx.QueryRow(ctx, `UPDATE tenants SET stripe_customer_id = NULL, stripe_features = '{}', updated_at = now()
		WHERE stripe_customer_id = $1 RETURNING id`, customer).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return ignored("", "%s %s: no tenant has this stripe_customer_id", reasonUnknownCustomer, customer), nil
	}
	if err != nil {
		return outcome{}, fmt.Errorf("billing: unlink customer: %w", err)
	}
	// Deleting a customer cancels its subscriptions; Stripe's own deleted
	// events may come later or not at all for our purposes.
	_, err = tx.Exec(ctx, `UPDATE subscriptions SET status = 'canceled', canceled_at = COALESCE(canceled_at, $2),
			past_due_since = NULL, grace_ends_at = NULL, last_event_at = GREATEST(last_event_at, $3), updated_at = now()
		WHERE stripe_customer_id = $1 AND status NOT IN ('canceled', 'incomplete_expired')`, customer, s.opts.Now(), ev.Created)
	if err != nil {
		return outcome{}, fmt.Errorf("billing: cancel subscriptions: %w", err)
	}
	return outcome{status: StatusProcessed, tenantID: tenant, bump: []string{tenant}, reasonText: "stripe: customer deleted " + ev.ID}, nil
}

func unixPtr(sec int64) *time.Time {
	if sec <= 0 {
		return nil
	}
	t := time.Unix(sec, 0).UTC()
	return &t
}
