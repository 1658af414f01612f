package billing

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Stripe moves fields between API versions (from 2025-03-31.basil a
// subscription's period lives on its items, and an invoice's subscription
// under parent.subscription_details). The views below read, from the raw
// JSON of any version, only the fields billing needs, each from every place
// a version puts it, so that no event is ignored or misread for its version.
// stripe-go's typed structs follow 2024-06-20 only.

// itemView is one subscription item.
type itemView struct {
	ID          string
	PriceID     string
	ProductID   string // the price's product (items.data[].price.product, id or expanded)
	Quantity    int64
	PeriodStart int64 // basil on: the item's current period
	PeriodEnd   int64
}

// subView is a subscription as billing reads it.
type subView struct {
	ID                string
	Customer          string
	Status            string
	Metadata          map[string]string
	CancelAtPeriodEnd bool
	TrialEnd          int64
	CanceledAt        int64
	PeriodStart       int64 // up to acacia on the subscription; from basil on its items
	PeriodEnd         int64
	PauseCollection   string // behavior while collection is paused, else ""
	LatestInvoice     string
	// StartDate and Created order a customer's subscriptions: the live
	// plan subscription that started last carries the plan (issue 25).
	StartDate int64
	Created   int64
	// BillingCycleAnchor is where the billing periods are aligned (a Unix
	// time; from 2025-12-15.clover the customer portal may move it).
	BillingCycleAnchor int64
	Items              []itemView
}

// invoiceView is an invoice as billing reads it.
type invoiceView struct {
	ID                 string
	Customer           string
	Subscription       string // invoice.subscription (to acacia) or parent.subscription_details.subscription (basil on)
	BillingReason      string
	AttemptCount       int64
	NextPaymentAttempt int64
	// CyclePeriod is the period of its subscription line (renewal invoices).
	CycleStart, CycleEnd int64
	// PaymentIntents paid it (payment_intent to acacia, payments from
	// basil on); Lines are its prices and quantities (top-ups).
	PaymentIntents []string
	Lines          []lineView
}

// lineView is one line of an invoice or a Checkout Session: its price
// (price.id to acacia, pricing.price_details.price from basil on) and
// quantity.
type lineView struct {
	Price    string
	Quantity int64
}

// checkoutView is a Checkout Session as billing reads it.
type checkoutView struct {
	ID                string
	Mode              string
	Customer          string
	ClientReferenceID string
	Metadata          map[string]string
	Subscription      string
	// Payment mode (top-ups): whether it is paid, and the invoice and
	// payment intent that are the same purchase.
	PaymentStatus string
	Invoice       string
	PaymentIntent string
}

// summaryView is an entitlement summary.
type summaryView struct {
	Customer string
	Keys     []string
	HasMore  bool
}

// expandable reads a field that is an id or an expanded object with an id.
func expandable(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.ID
	}
	return ""
}

// flexInt reads a Unix time or count that some producers send as a string.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = 0
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		*f = flexInt(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not a number: %q", s)
	}
	*f = flexInt(n)
	return nil
}

// metadata reads a metadata object, tolerating null and non-string values.
func metadata(raw json.RawMessage) map[string]string {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

func parseSubscription(raw json.RawMessage) (subView, error) {
	var o struct {
		Object            string          `json:"object"`
		ID                string          `json:"id"`
		Customer          json.RawMessage `json:"customer"`
		Status            string          `json:"status"`
		Metadata          json.RawMessage `json:"metadata"`
		CancelAtPeriodEnd bool            `json:"cancel_at_period_end"`
		TrialEnd          flexInt         `json:"trial_end"`
		CanceledAt        flexInt         `json:"canceled_at"`
		PeriodStart       flexInt         `json:"current_period_start"`
		PeriodEnd         flexInt         `json:"current_period_end"`
		PauseCollection   *struct {
			Behavior string `json:"behavior"`
		} `json:"pause_collection"`
		LatestInvoice      json.RawMessage `json:"latest_invoice"`
		StartDate          flexInt         `json:"start_date"`
		Created            flexInt         `json:"created"`
		BillingCycleAnchor json.RawMessage `json:"billing_cycle_anchor"`
		Items              *struct {
			Data []struct {
				ID          string          `json:"id"`
				Price       json.RawMessage `json:"price"`
				Plan        json.RawMessage `json:"plan"` // pre-2018 items name their price "plan"
				Quantity    *flexInt        `json:"quantity"`
				PeriodStart flexInt         `json:"current_period_start"`
				PeriodEnd   flexInt         `json:"current_period_end"`
			} `json:"data"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return subView{}, fmt.Errorf("data.object is not a subscription: %w", err)
	}
	if o.Object != "" && o.Object != "subscription" {
		return subView{}, fmt.Errorf("data.object is a %s, not a subscription", o.Object)
	}
	v := subView{ID: o.ID, Customer: expandable(o.Customer), Status: o.Status, Metadata: metadata(o.Metadata),
		CancelAtPeriodEnd: o.CancelAtPeriodEnd, TrialEnd: int64(o.TrialEnd), CanceledAt: int64(o.CanceledAt),
		PeriodStart: int64(o.PeriodStart), PeriodEnd: int64(o.PeriodEnd), LatestInvoice: expandable(o.LatestInvoice),
		StartDate: int64(o.StartDate), Created: int64(o.Created), BillingCycleAnchor: anchorTime(o.BillingCycleAnchor)}
	if o.PauseCollection != nil {
		v.PauseCollection = o.PauseCollection.Behavior
		if v.PauseCollection == "" {
			v.PauseCollection = "paused"
		}
	}
	if o.Items != nil {
		for _, it := range o.Items.Data {
			iv := itemView{ID: it.ID, PriceID: expandable(it.Price), Quantity: 1,
				PeriodStart: int64(it.PeriodStart), PeriodEnd: int64(it.PeriodEnd)}
			if iv.PriceID == "" {
				iv.PriceID = expandable(it.Plan)
			}
			iv.ProductID = priceProduct(it.Price)
			if iv.ProductID == "" {
				iv.ProductID = priceProduct(it.Plan)
			}
			if it.Quantity != nil {
				iv.Quantity = int64(*it.Quantity)
			}
			v.Items = append(v.Items, iv)
		}
	}
	return v, nil
}

// priceProduct is the product of a price object (an id or an expanded
// product), "" when the price is only an id.
func priceProduct(raw json.RawMessage) string {
	var p struct {
		Product json.RawMessage `json:"product"`
	}
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &p) != nil {
		return ""
	}
	return expandable(p.Product)
}

// anchorTime reads billing_cycle_anchor: a Unix time on every version so
// far, read also as an object with a timestamp (the shape endive gives the
// parameter) so that a future move of the field is not a parse error.
func anchorTime(raw json.RawMessage) int64 {
	if len(raw) == 0 || string(raw) == "null" {
		return 0
	}
	var n flexInt
	if json.Unmarshal(raw, &n) == nil {
		return int64(n)
	}
	var obj struct {
		Timestamp flexInt `json:"timestamp"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return int64(obj.Timestamp)
	}
	return 0
}

// period is the subscription's current period: its own fields up to acacia,
// else (basil on) the items' (the plan item's when known, the earliest
// start and latest end otherwise, which for one billing cycle are the same).
func (v subView) period(planItem string) (int64, int64) {
	if v.PeriodStart > 0 && v.PeriodEnd > v.PeriodStart {
		return v.PeriodStart, v.PeriodEnd
	}
	var start, end int64
	for _, it := range v.Items {
		if it.PeriodStart <= 0 || it.PeriodEnd <= it.PeriodStart {
			continue
		}
		if it.ID == planItem && planItem != "" {
			return it.PeriodStart, it.PeriodEnd
		}
		if start == 0 || it.PeriodStart < start {
			start = it.PeriodStart
		}
		if it.PeriodEnd > end {
			end = it.PeriodEnd
		}
	}
	return start, end
}

func parseInvoice(raw json.RawMessage) (invoiceView, error) {
	type lineParent struct {
		Type                    string `json:"type"`
		SubscriptionItemDetails *struct {
			Subscription string `json:"subscription"`
		} `json:"subscription_item_details"`
	}
	var o struct {
		Object             string          `json:"object"`
		ID                 string          `json:"id"`
		Customer           json.RawMessage `json:"customer"`
		Subscription       json.RawMessage `json:"subscription"`
		BillingReason      string          `json:"billing_reason"`
		AttemptCount       flexInt         `json:"attempt_count"`
		NextPaymentAttempt flexInt         `json:"next_payment_attempt"`
		Parent             *struct {
			SubscriptionDetails *struct {
				Subscription json.RawMessage `json:"subscription"`
			} `json:"subscription_details"`
		} `json:"parent"`
		PaymentIntent json.RawMessage `json:"payment_intent"`
		Payments      *struct {
			Data []struct {
				Payment *struct {
					PaymentIntent json.RawMessage `json:"payment_intent"`
				} `json:"payment"`
			} `json:"data"`
		} `json:"payments"`
		Lines *struct {
			Data []struct {
				Type     string          `json:"type"`
				Parent   *lineParent     `json:"parent"`
				Quantity *flexInt        `json:"quantity"`
				Price    json.RawMessage `json:"price"`
				Pricing  *struct {
					PriceDetails *struct {
						Price json.RawMessage `json:"price"`
					} `json:"price_details"`
				} `json:"pricing"`
				Period *struct {
					Start flexInt `json:"start"`
					End   flexInt `json:"end"`
				} `json:"period"`
			} `json:"data"`
		} `json:"lines"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return invoiceView{}, fmt.Errorf("data.object is not an invoice: %w", err)
	}
	if o.Object != "" && o.Object != "invoice" {
		return invoiceView{}, fmt.Errorf("data.object is a %s, not an invoice", o.Object)
	}
	v := invoiceView{ID: o.ID, Customer: expandable(o.Customer), Subscription: expandable(o.Subscription),
		BillingReason: o.BillingReason, AttemptCount: int64(o.AttemptCount), NextPaymentAttempt: int64(o.NextPaymentAttempt)}
	if v.Subscription == "" && o.Parent != nil && o.Parent.SubscriptionDetails != nil {
		v.Subscription = expandable(o.Parent.SubscriptionDetails.Subscription)
	}
	if pi := expandable(o.PaymentIntent); pi != "" {
		v.PaymentIntents = append(v.PaymentIntents, pi)
	}
	if o.Payments != nil {
		for _, p := range o.Payments.Data {
			if p.Payment != nil {
				if pi := expandable(p.Payment.PaymentIntent); pi != "" {
					v.PaymentIntents = append(v.PaymentIntents, pi)
				}
			}
		}
	}
	if o.Lines != nil {
		for _, l := range o.Lines.Data {
			price := expandable(l.Price)
			if price == "" && l.Pricing != nil && l.Pricing.PriceDetails != nil {
				price = expandable(l.Pricing.PriceDetails.Price)
			}
			q := int64(1)
			if l.Quantity != nil {
				q = int64(*l.Quantity)
			}
			if price != "" {
				v.Lines = append(v.Lines, lineView{Price: price, Quantity: q})
			}
		}
		for _, l := range o.Lines.Data {
			if l.Period == nil || l.Period.End <= l.Period.Start {
				continue
			}
			// To acacia a subscription line has type "subscription"; from
			// basil on its parent is subscription_item_details.
			sub := l.Type == "subscription" || (l.Type == "" && l.Parent == nil) ||
				(l.Parent != nil && (l.Parent.Type == "subscription_item_details" || l.Parent.SubscriptionItemDetails != nil))
			if sub {
				v.CycleStart, v.CycleEnd = int64(l.Period.Start), int64(l.Period.End)
				break
			}
		}
	}
	return v, nil
}

func parseCheckout(raw json.RawMessage) (checkoutView, error) {
	var o struct {
		Object            string          `json:"object"`
		ID                string          `json:"id"`
		Mode              string          `json:"mode"`
		Customer          json.RawMessage `json:"customer"`
		ClientReferenceID *string         `json:"client_reference_id"`
		Metadata          json.RawMessage `json:"metadata"`
		Subscription      json.RawMessage `json:"subscription"`
		PaymentStatus     string          `json:"payment_status"`
		Invoice           json.RawMessage `json:"invoice"`
		PaymentIntent     json.RawMessage `json:"payment_intent"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return checkoutView{}, fmt.Errorf("data.object is not a checkout session: %w", err)
	}
	if o.Object != "" && o.Object != "checkout.session" {
		return checkoutView{}, fmt.Errorf("data.object is a %s, not a checkout session", o.Object)
	}
	v := checkoutView{ID: o.ID, Mode: o.Mode, Customer: expandable(o.Customer), Metadata: metadata(o.Metadata),
		Subscription: expandable(o.Subscription), PaymentStatus: o.PaymentStatus, Invoice: expandable(o.Invoice),
		PaymentIntent: expandable(o.PaymentIntent)}
	if o.ClientReferenceID != nil {
		v.ClientReferenceID = *o.ClientReferenceID
	}
	return v, nil
}

func parseSummary(raw json.RawMessage) (summaryView, error) {
	var o struct {
		Customer     json.RawMessage `json:"customer"`
		Entitlements *struct {
			HasMore bool `json:"has_more"`
			Data    []struct {
				LookupKey string `json:"lookup_key"`
			} `json:"data"`
		} `json:"entitlements"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return summaryView{}, fmt.Errorf("data.object is not an entitlement summary: %w", err)
	}
	v := summaryView{Customer: expandable(o.Customer), Keys: []string{}}
	if o.Entitlements != nil {
		v.HasMore = o.Entitlements.HasMore
		for _, e := range o.Entitlements.Data {
			if e.LookupKey != "" {
				v.Keys = append(v.Keys, e.LookupKey)
			}
		}
	}
	return v, nil
}

// previousObject is data.object as it was before the event: data.object
// with data.previous_attributes laid over it (Stripe gives every changed
// top-level field, arrays whole). ok is false without previous_attributes.
func previousObject(object, previous json.RawMessage) (json.RawMessage, bool) {
	if len(previous) == 0 || string(previous) == "null" {
		return nil, false
	}
	var obj, prev map[string]json.RawMessage
	if json.Unmarshal(object, &obj) != nil || json.Unmarshal(previous, &prev) != nil || len(prev) == 0 {
		return nil, false
	}
	for k, v := range prev {
		if k == "items" {
			// previous_attributes.items carries only data; keep the rest.
			var it map[string]json.RawMessage
			if json.Unmarshal(obj[k], &it) == nil && it != nil {
				var pit map[string]json.RawMessage
				if json.Unmarshal(v, &pit) == nil {
					for pk, pv := range pit {
						it[pk] = pv
					}
					v, _ = json.Marshal(it)
				}
			}
		}
		obj[k] = v
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, false
	}
	return out, true
}
