package billing

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// Linking a Stripe customer to a tenant (churn rules, issue 9 point 4):
//   - a customer linked to a tenant stays its customer;
//   - metadata.tenant_id (subscription) or client_reference_id /
//     metadata.tenant_id (Checkout) links a customer to a tenant only when
//     the subscription is not terminal and the customer was never deleted;
//   - a tenant already linked to another customer is re-linked to the new
//     one only when the old one has no live subscription left (a tenant that
//     churned and comes back through a new Checkout).

// tenantFor finds or links the tenant of a customer; when there is none it
// says why.
func (s *Service) tenantFor(ctx context.Context, w *entitlements.Writes, customer string, meta map[string]string, status string) (string, string, error) {
	if customer == "" {
		return "", "the object names no customer", nil
	}
	t, err := w.TenantByCustomer(ctx, customer)
	if err != nil || t != "" {
		return t, "", err
	}
	ref := meta["tenant_id"]
	tid, err := w.TenantByRef(ctx, ref)
	if err != nil {
		return "", "", err
	}
	if tid == "" {
		if ids.IsUUID(ref) {
			// The reason link gives an unknown tenant id, as before.
			tid = ref
		} else {
			return "", "no tenant has this stripe_customer_id and metadata.tenant_id names none (no tenant id or external id " + strconv.Quote(ref) + ")", nil
		}
	}
	if terminal(status) {
		return "", fmt.Sprintf("no tenant has this stripe_customer_id, and a %s subscription never links one (metadata.tenant_id %s)", status, ref), nil
	}
	return s.link(ctx, w, tid, customer)
}

// link links customer to tenant tid under the churn rules; it returns the
// tenant, or "" and why not.
func (s *Service) link(ctx context.Context, w *entitlements.Writes, tid, customer string) (string, string, error) {
	deleted, err := customerDeleted(ctx, w.Tx(), customer)
	if err != nil {
		return "", "", err
	}
	if deleted {
		return "", fmt.Sprintf("customer %s was deleted in Stripe; a deleted customer never links a tenant", customer), nil
	}
	linked, ok, err := w.LockTenant(ctx, tid)
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", fmt.Sprintf("tenant %s does not exist", tid), nil
	}
	if linked == customer {
		return tid, "", nil
	}
	if linked != "" {
		live, err := w.CustomerLive(ctx, linked)
		if err != nil {
			return "", "", err
		}
		if live {
			return "", fmt.Sprintf("tenant %s is already linked to customer %s, which still has a live subscription", tid, linked), nil
		}
	}
	done, err := w.LinkCustomer(ctx, tid, customer)
	if err != nil {
		return "", "", err
	}
	if !done {
		return "", fmt.Sprintf("customer %s is linked to another tenant", customer), nil
	}
	// Events that arrived before the link were ignored for an unknown
	// customer; they run again now.
	if err := s.requeueUnknown(ctx, w.Tx(), customer); err != nil {
		return "", "", err
	}
	return tid, "", nil
}

// customerDeleted: a customer.deleted event for it was received.
func customerDeleted(ctx context.Context, tx pgx.Tx, customer string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stripe_events WHERE stripe_customer_id = $1 AND type = 'customer.deleted')`, customer).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("billing: customer deleted: %w", err)
	}
	return ok, nil
}

func (s *Service) requeueUnknown(ctx context.Context, tx pgx.Tx, customer string) error {
	rows, err := tx.Query(ctx, `
		UPDATE stripe_events SET status = 'pending', ignored_reason = NULL
		WHERE stripe_customer_id = $1 AND status = 'ignored' AND ignored_reason LIKE $2
		RETURNING id`, customer, reasonUnknownCustomer+"%")
	if err != nil {
		return fmt.Errorf("billing: requeue events: %w", err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("billing: requeue events: %w", err)
	}
	for _, id := range evs {
		if _, err := s.jobs.InsertTx(ctx, tx, EventArgs{EventID: id, CustomerID: customer}, nil); err != nil {
			return fmt.Errorf("billing: requeue event: %w", err)
		}
	}
	return nil
}

// requeueEarly sets pending again, and enqueues, the events of customer
// that were ignored because their subscription was not known yet (an
// invoice.paid delivered before customer.subscription.created): called when
// that subscription's first event is applied, in the same transaction.
func (s *Service) requeueEarly(ctx context.Context, tx pgx.Tx, customer, subscription string) error {
	rows, err := tx.Query(ctx, `
		UPDATE stripe_events SET status = 'pending', ignored_reason = NULL
		WHERE stripe_customer_id = $1 AND status = 'ignored' AND ignored_reason LIKE $2
		RETURNING id`, customer, reasonUnknownSubscription+" "+subscription+":%")
	if err != nil {
		return fmt.Errorf("billing: requeue early events: %w", err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("billing: requeue early events: %w", err)
	}
	for _, id := range evs {
		if _, err := s.jobs.InsertTx(ctx, tx, EventArgs{EventID: id, CustomerID: customer}, nil); err != nil {
			return fmt.Errorf("billing: requeue early event: %w", err)
		}
	}
	return nil
}

// checkoutTenant is the tenant a Checkout session names:
// client_reference_id, then metadata.tenant_id, each a tenant id first and
// then an external id (a backend that starts Checkout with its own id for
// the tenant). A tenant id no tenant has is kept, so that link says so;
// "" when neither names one.
func checkoutTenant(ctx context.Context, w *entitlements.Writes, cs checkoutView) (string, error) {
	refs := []string{cs.ClientReferenceID, cs.Metadata["tenant_id"]}
	for _, ref := range refs {
		id, err := w.TenantByRef(ctx, ref)
		if err != nil || id != "" {
			return id, err
		}
	}
	for _, ref := range refs {
		if ids.IsUUID(ref) {
			return ref, nil
		}
	}
	return "", nil
}

func (s *Service) applyCheckout(ctx context.Context, w *entitlements.Writes, ev storedEvent, cs checkoutView, pre prefetched) (outcome, error) {
	if cs.Mode != "subscription" {
		return ignored("", "checkout session in mode %q does not start a subscription", cs.Mode), nil
	}
	if cs.Customer == "" {
		return ignored("", "checkout session %s has no customer", cs.ID), nil
	}
	tid, err := checkoutTenant(ctx, w, cs)
	if err != nil {
		return outcome{}, err
	}
	if tid == "" {
		return ignored("", "checkout session %s names no tenant (client_reference_id %q, metadata.tenant_id %q: no tenant id or external id)", cs.ID, cs.ClientReferenceID, cs.Metadata["tenant_id"]), nil
	}
	other, err := w.TenantByCustomer(ctx, cs.Customer)
	if err != nil {
		return outcome{}, err
	}
	if other != "" && other != tid {
		return ignored(tid, "customer %s is already linked to tenant %s", cs.Customer, other), nil
	}
	if other == "" {
		got, why, err := s.link(ctx, w, tid, cs.Customer)
		if err != nil {
			return outcome{}, err
		}
		if got == "" {
			return ignored(tid, "checkout session %s: %s", cs.ID, why), nil
		}
	}
	res := outcome{status: StatusProcessed, tenantID: tid}
	if pre.sub != nil {
		// With a secret key the session's subscription was read: apply it
		// now rather than wait for its own events.
		in := subInput{view: *pre.sub, eventID: ev.ID, eventType: ev.Type, created: ev.Created, fetchedAt: &pre.fetchedAt, raw: ev, fromInvoice: true}
		r, err := s.applySubscription(ctx, w, in)
		if err != nil {
			return outcome{}, err
		}
		if r.status == StatusFailed {
			return r, nil
		}
	}
	return res, nil
}
