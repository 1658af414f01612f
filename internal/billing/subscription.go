package billing

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// subInput is a subscription state to apply and where it came from.
type subInput struct {
	view      subView
	eventID   string
	eventType string
	created   time.Time  // the event's created time
	fetchedAt *time.Time // set when view was read from Stripe just now
	raw       storedEvent
	// fromInvoice: applied on behalf of an invoice or checkout event, which
	// never links a tenant by metadata on its own.
	fromInvoice bool
}

// planItems are the items whose price maps to a plan, with the plan keys.
func planItems(ctx context.Context, w *entitlements.Writes, items []itemView) ([]itemView, []string, error) {
	var its []itemView
	var plans []string
	for _, it := range items {
		plan, err := catalogue.PlanForItem(ctx, w.Tx(), it.PriceID, it.ProductID)
		if err != nil {
			return nil, nil, err
		}
		if plan != "" {
			its, plans = append(its, it), append(plans, plan)
		}
	}
	return its, plans, nil
}

func (s *Service) applySubscription(ctx context.Context, w *entitlements.Writes, in subInput) (outcome, error) {
	sub := in.view
	if sub.ID == "" {
		return ignored("", "data.object has no subscription id"), nil
	}
	customer := sub.Customer
	if customer == "" {
		customer = in.raw.Customer
	}
	tenant, why, err := s.tenantFor(ctx, w, customer, sub.Metadata, sub.Status)
	if err != nil {
		return outcome{}, err
	}
	if tenant == "" {
		return ignored("", "%s %s: %s", reasonUnknownCustomer, customer, why), nil
	}
	tx := w.Tx()
	cur, err := loadSub(ctx, w, sub.ID)
	if err != nil {
		return outcome{}, err
	}
	created := in.created
	sameSecondCreated := false
	if in.fetchedAt != nil {
		// Read from Stripe just now: the state is current whatever the
		// event's age, unless a later read was applied already.
		if cur != nil && cur.FetchedAt != nil && cur.FetchedAt.After(*in.fetchedAt) {
			return ignored(tenant, "stale: a later read of subscription %s from Stripe was applied already", sub.ID), nil
		}
	} else {
		if why := stale(cur, created, false); why != "" {
			return ignored(tenant, "%s", why), nil
		}
		if why, err := s.sameSecondOlder(ctx, tx, cur, in); err != nil {
			return outcome{}, err
		} else if why != "" {
			return ignored(tenant, "%s", why), nil
		}
		// A created event in the same second as an applied one is older than
		// it, unless it changes nothing (a replay of itself).
		sameSecondCreated = in.eventType == "customer.subscription.created" && stale(cur, created, true) != "" &&
			(cur.LastEventID == nil || *cur.LastEventID != in.eventID)
	}
	status := sub.Status
	if cur != nil && terminal(cur.Status) && !terminal(status) {
		return ignored(tenant, "subscription %s is %s; a late event does not revive it", sub.ID, cur.Status), nil
	}

	// The plan comes from the item whose price maps to a plan; other items
	// (add-ons, metered overage) never block anything.
	its, plans, err := planItems(ctx, w, sub.Items)
	if err != nil {
		return outcome{}, err
	}
	if len(its) > 1 {
		return failed(tenant, "subscription %s has %d items whose prices map to plans (%s); exactly one item may carry the plan",
			sub.ID, len(its), describeItems(its, plans)), nil
	}
	var planItem *itemView
	if len(its) == 1 {
		planItem = &its[0]
	}
	// A subscription none of whose items maps to a plan (an add-on billed
	// on its own) is stored all the same: it grants its add-ons and never
	// the plan (issue 25). One that maps nothing at all is shown to admins.
	if len(its) == 0 && cur == nil && !terminal(status) {
		addons := 0
		prices := make([]string, 0, len(sub.Items))
		for _, it := range sub.Items {
			prices = append(prices, it.PriceID)
			a, err := catalogue.AddonForItem(ctx, w.Tx(), it.PriceID, it.ProductID)
			if err != nil {
				return outcome{}, err
			}
			if a != "" {
				addons++
			}
		}
		if addons == 0 {
			return ignored(tenant, "no item of subscription %s has a price mapped to a plan or an add-on (prices %s; add the price to a plan's stripe_price_ids or PUT /admin/v1/addons/{price})",
				sub.ID, strings.Join(prices, ", ")), nil
		}
	}
	next := subRow{StoredSubscription: entitlements.StoredSubscription{TenantID: tenant, PlanQuantity: 1}}
	if cur != nil {
		next = *cur
	}
	next.TenantID, next.Status, next.CancelAtPeriodEnd = tenant, status, sub.CancelAtPeriodEnd
	lastAt := created
	if next.LastEventAt != nil && next.LastEventAt.After(lastAt) {
		lastAt = *next.LastEventAt
	}
	next.LastEventAt = &lastAt
	next.LastEventID = nullable(in.eventID)
	if in.fetchedAt != nil {
		next.FetchedAt = in.fetchedAt
	}
	if planItem != nil {
		next.PriceID, next.ItemID, next.PlanQuantity = nullable(planItem.PriceID), nullable(planItem.ID), planItem.Quantity
	}
	next.HasPlanItem = next.PriceID != nil
	if sub.StartDate > 0 {
		next.StartDate = unixPtr(sub.StartDate)
	}
	if sub.Created > 0 {
		next.StripeCreated = unixPtr(sub.Created)
	}
	next.Items = slices.Clone(sub.Items)
	if next.Items == nil {
		next.Items = []itemView{}
	}
	slices.SortFunc(next.Items, func(a, b itemView) int { return strings.Compare(a.ID, b.ID) })
	planItemID := ""
	if planItem != nil {
		planItemID = planItem.ID
	}
	if ps, pe := sub.period(planItemID); ps > 0 && pe > ps {
		next.PeriodStart, next.PeriodEnd = unixPtr(ps), unixPtr(pe)
	}
	next.TrialEnd = unixPtr(sub.TrialEnd)
	next.PauseCollection = nullable(sub.PauseCollection)
	if sub.LatestInvoice != "" {
		next.LatestInvoiceID = nullable(sub.LatestInvoice)
	}
	if in.eventType == "customer.subscription.trial_will_end" {
		next.TrialWillEndAt = next.TrialEnd
		if next.TrialWillEndAt == nil {
			next.TrialWillEndAt = &created
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
		if effective(cur) != effective(&next) {
			return ignored(tenant, "%s", stale(cur, created, true)), nil
		}
		return outcome{status: StatusProcessed, tenantID: tenant}, nil
	}
	if err := saveSub(ctx, w, sub.ID, customer, &next); err != nil {
		return outcome{}, err
	}
	res := outcome{status: StatusProcessed, tenantID: tenant}
	if cur == nil {
		if err := s.requeueEarly(ctx, tx, customer, sub.ID); err != nil {
			return outcome{}, err
		}
	}
	// The event changed its own subscription only; the tenant's plan is
	// recomputed from all of them, so that a late event of an older
	// subscription cannot set the plan back (issue 25).
	if err := s.recomputePlan(ctx, w, tenant); err != nil {
		return outcome{}, err
	}
	// The webhook of a change we made ourselves (a plan change through
	// Stripe) finds everything as it is: no new version, no flapping.
	if cur == nil || effective(cur) != effective(&next) {
		w.Changed(tenant)
	}
	return res, nil
}

// recomputePlan puts the tenant on the plan of its current subscription
// (the view current_subscriptions: the live plan subscription that
// started last), computed from every subscription stored for it rather
// than from the event at hand. A current subscription that ended leaves the
// plan as it is (the status sends the tenant to the default plan; an admin
// may have assigned another since).
func (s *Service) recomputePlan(ctx context.Context, w *entitlements.Writes, tenant string) error {
	status, price, product, ok, err := w.CurrentPlanItem(ctx, tenant)
	if err != nil || !ok {
		return err
	}
	if terminal(status) || price == "" {
		return nil
	}
	plan, err := catalogue.PlanForItem(ctx, w.Tx(), price, product)
	if err != nil || plan == "" {
		return err
	}
	_, err = w.SetPlan(ctx, tenant, plan)
	return err
}

func describeItems(its []itemView, plans []string) string {
	parts := make([]string, len(its))
	for i := range its {
		parts[i] = fmt.Sprintf("item %s price %s → plan %s", its[i].ID, its[i].PriceID, plans[i])
	}
	return strings.Join(parts, "; ")
}

// sameSecondOlder orders an event against the applied one of the same
// second (Stripe's created has whole seconds): when the applied event's
// previous_attributes describe exactly this event's state, this event came
// before it and must not overwrite it.
func (s *Service) sameSecondOlder(ctx context.Context, tx pgx.Tx, cur *subRow, in subInput) (string, error) {
	if cur == nil || cur.LastEventAt == nil || !cur.LastEventAt.Equal(in.created) || cur.LastEventID == nil || *cur.LastEventID == in.eventID {
		return "", nil
	}
	var payload []byte
	err := tx.QueryRow(ctx, `SELECT payload FROM stripe_events WHERE id = $1`, *cur.LastEventID).Scan(&payload)
	if err == pgx.ErrNoRows {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("billing: load applied event: %w", err)
	}
	var last struct {
		Data struct {
			Object   json.RawMessage `json:"object"`
			Previous json.RawMessage `json:"previous_attributes"`
		} `json:"data"`
	}
	if json.Unmarshal(payload, &last) != nil {
		return "", nil
	}
	before, ok := previousObject(last.Data.Object, last.Data.Previous)
	if !ok {
		return "", nil
	}
	prev, err1 := parseSubscription(before)
	after, err2 := parseSubscription(last.Data.Object)
	if err1 != nil || err2 != nil {
		return "", nil
	}
	if fingerprint(prev) == fingerprint(in.view) && fingerprint(after) != fingerprint(in.view) {
		return fmt.Sprintf("stale: event %s of the same second changed the subscription from this state (its previous_attributes), so this one is older", *cur.LastEventID), nil
	}
	return "", nil
}

// fingerprint is what of a subscription view decides our state.
func fingerprint(v subView) string {
	items := make([]string, 0, len(v.Items))
	for _, it := range v.Items {
		items = append(items, fmt.Sprintf("%s:%s:%d", it.ID, it.PriceID, it.Quantity))
	}
	slices.Sort(items)
	ps, pe := v.period("")
	return fmt.Sprint(v.Status, "|", v.CancelAtPeriodEnd, "|", v.TrialEnd, "|", ps, "|", pe, "|", v.PauseCollection, "|", strings.Join(items, ","))
}
