package billing

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/entitlements"
)

func (s *Service) applySummary(ctx context.Context, w *entitlements.Writes, ev storedEvent, sum summaryView, pre prefetched) (outcome, error) {
	tenant, err := w.TenantByCustomer(ctx, sum.Customer)
	if err != nil {
		return outcome{}, err
	}
	if tenant == "" {
		return ignored("", "%s %s: no tenant has this stripe_customer_id", reasonUnknownCustomer, sum.Customer), nil
	}
	keys := pre.features
	if keys == nil {
		// Only a summary complete in itself can be stale: a re-listed one
		// is the state now.
		var newer bool
		err := w.Tx().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stripe_events WHERE stripe_customer_id = $1 AND type = $2
			AND status = 'processed' AND event_created > $3 AND id <> $4)`, sum.Customer, ev.Type, ev.Created, ev.ID).Scan(&newer)
		if err != nil {
			return outcome{}, fmt.Errorf("billing: newer summary: %w", err)
		}
		if newer {
			return ignored(tenant, "stale: a newer entitlement summary was already applied"), nil
		}
		if older, err := sameSecondSummaryOlder(ctx, w, ev, sum); err != nil {
			return outcome{}, err
		} else if older != "" {
			return ignored(tenant, "stale: summary %s of the same second changed the features from this list (its previous_attributes), so this one is older", older), nil
		}
		keys = sum.Keys
	}
	if _, err := w.SetStripeFeatures(ctx, tenant, keys); err != nil {
		return outcome{}, err
	}
	return outcome{status: StatusProcessed, tenantID: tenant}, nil
}

func (s *Service) applyCustomerDeleted(ctx context.Context, w *entitlements.Writes, ev storedEvent) (outcome, error) {
	customer := ev.Customer
	tenant, err := w.UnlinkCustomer(ctx, customer)
	if err != nil {
		return outcome{}, err
	}
	// Deleting a customer cancels its subscriptions; Stripe's own deleted
	// events may come later, or not at all for our purposes.
	if err := w.CancelCustomerSubscriptions(ctx, customer, s.opts.Now(), ev.Created); err != nil {
		return outcome{}, err
	}
	if tenant == "" {
		return ignored("", "%s %s: no tenant has this stripe_customer_id", reasonUnknownCustomer, customer), nil
	}
	return outcome{status: StatusProcessed, tenantID: tenant}, nil
}

// sameSecondSummaryOlder orders a summary against those of the same second
// already applied: when one's previous_attributes give exactly this
// summary's list (and its own list differs), this one came before it.
func sameSecondSummaryOlder(ctx context.Context, w *entitlements.Writes, ev storedEvent, sum summaryView) (string, error) {
	rows, err := w.Tx().Query(ctx, `SELECT id, payload FROM stripe_events WHERE stripe_customer_id = $1 AND type = $2
		AND status = 'processed' AND event_created = $3 AND id <> $4`, sum.Customer, ev.Type, ev.Created, ev.ID)
	if err != nil {
		return "", fmt.Errorf("billing: same-second summaries: %w", err)
	}
	type applied struct {
		id      string
		payload []byte
	}
	var list []applied
	var a applied
	if _, err := pgx.ForEachRow(rows, []any{&a.id, &a.payload}, func() error {
		list = append(list, a)
		return nil
	}); err != nil {
		return "", fmt.Errorf("billing: same-second summaries: %w", err)
	}
	mine := strings.Join(normalizeKeys(sum.Keys), ",")
	for _, a := range list {
		var p struct {
			Data struct {
				Object   json.RawMessage `json:"object"`
				Previous json.RawMessage `json:"previous_attributes"`
			} `json:"data"`
		}
		if json.Unmarshal(a.payload, &p) != nil {
			continue
		}
		before, ok := previousObject(p.Data.Object, p.Data.Previous)
		if !ok {
			continue
		}
		prev, err1 := parseSummary(before)
		after, err2 := parseSummary(p.Data.Object)
		if err1 != nil || err2 != nil {
			continue
		}
		if strings.Join(normalizeKeys(prev.Keys), ",") == mine && strings.Join(normalizeKeys(after.Keys), ",") != mine {
			return a.id, nil
		}
	}
	return "", nil
}
