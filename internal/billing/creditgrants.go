package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
)

// Stripe billing credits (issue 26 point 5). Stripe applies a credit grant
// only when an invoice is finalised; Tollgate mirrors it as a grant of the
// meters it covers so that the limiter draws it in every decision. Units
// drawn from such a grant stay reported to Stripe as usage (the credit is
// applied there, on the invoice), unlike Tollgate's own grants.
//
// A credit grant covers the meters of the metered prices its scope names
// (applicability_config.scope.prices), or, for price_type "metered", of
// every metered price on the customer's live subscriptions. A price's meter
// is its recurring.meter, whose event_name is a quota's stripe_meter_event
// on the tenant's plan (the name the quota's usage is reported under). Its
// value is converted at each price's unit_amount_decimal (× the
// price's transform_quantity.divide_by), rounding down. A credit grant
// covering several meters never gives more than its value: its value is
// split evenly between them (each share rounded down), unless
// metadata.tollgate_meter names the one meter to put it all on.

// MetaCreditMeter is the credit grant metadata key naming the one meter a
// credit covering several goes to.
const MetaCreditMeter = "tollgate_meter"

func isCreditGrantEvent(typ string) bool {
	return typ == "billing.credit_grant.created" || typ == "billing.credit_grant.updated"
}

// Why a credit grant was not mirrored, the label of
// tollgate_stripe_credit_grants_skipped_total.
const (
	skipNoCredits       = "credits_off"
	skipBadPayload      = "bad_payload"
	skipUnknownCustomer = "unknown_customer"
	skipNotMonetary     = "not_monetary"
	skipScope           = "scope"
	skipNoKey           = "no_secret_key"
	skipUnmappedPrice   = "unmapped_price"
	skipCurrency        = "currency"
	skipMeterChoice     = "tollgate_meter"
	skipTooSmall        = "too_small"
)

var creditSkipReasons = []string{skipNoCredits, skipBadPayload, skipUnknownCustomer, skipNotMonetary, skipScope, skipNoKey,
	skipUnmappedPrice, skipCurrency, skipMeterChoice, skipTooSmall}

// creditGrantView is what billing reads of a billing.credit_grant, from
// the raw JSON of any API version (unknown fields are ignored).
type creditGrantView struct {
	ID          string
	Customer    string
	AmountType  string
	Monetary    bool
	Currency    string
	Value       int64
	PriceType   string
	Prices      []string
	ItemsScoped bool // scope.billable_items (newer versions), not mirrored
	Priority    *int
	Name        string
	Created     time.Time
	EffectiveAt *time.Time
	ExpiresAt   *time.Time
	VoidedAt    *time.Time
	Updated     time.Time
	Metadata    map[string]string
}

func parseCreditGrant(raw json.RawMessage) (creditGrantView, error) {
	var o struct {
		Object   string          `json:"object"`
		ID       string          `json:"id"`
		Customer json.RawMessage `json:"customer"`
		Amount   struct {
			Type     string `json:"type"`
			Monetary *struct {
				Currency string `json:"currency"`
				Value    int64  `json:"value"`
			} `json:"monetary"`
		} `json:"amount"`
		Applicability struct {
			Scope struct {
				PriceType string `json:"price_type"`
				Prices    []struct {
					ID *string `json:"id"`
				} `json:"prices"`
				BillableItems []json.RawMessage `json:"billable_items"`
			} `json:"scope"`
		} `json:"applicability_config"`
		Priority    *int              `json:"priority"`
		Name        *string           `json:"name"`
		Created     int64             `json:"created"`
		EffectiveAt int64             `json:"effective_at"` // null: effective once created
		ExpiresAt   int64             `json:"expires_at"`   // null: never expires
		VoidedAt    int64             `json:"voided_at"`    // null: not voided
		Updated     int64             `json:"updated"`
		Metadata    map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return creditGrantView{}, fmt.Errorf("data.object is not a credit grant: %w", err)
	}
	if o.Object != "billing.credit_grant" || o.ID == "" {
		return creditGrantView{}, fmt.Errorf("data.object is %q, not a billing.credit_grant with an id", o.Object)
	}
	v := creditGrantView{ID: o.ID, Customer: expandable(o.Customer), AmountType: o.Amount.Type,
		PriceType: o.Applicability.Scope.PriceType, ItemsScoped: len(o.Applicability.Scope.BillableItems) > 0,
		Priority: o.Priority, Created: time.Unix(o.Created, 0).UTC(), EffectiveAt: unixPtr(o.EffectiveAt),
		ExpiresAt: unixPtr(o.ExpiresAt), VoidedAt: unixPtr(o.VoidedAt), Metadata: o.Metadata}
	if o.Amount.Monetary != nil {
		v.Monetary, v.Currency, v.Value = true, strings.ToLower(o.Amount.Monetary.Currency), o.Amount.Monetary.Value
	}
	for _, p := range o.Applicability.Scope.Prices {
		if p.ID != nil && *p.ID != "" && !slices.Contains(v.Prices, *p.ID) {
			v.Prices = append(v.Prices, *p.ID)
		}
	}
	if o.Name != nil {
		v.Name = *o.Name
	}
	v.Updated = time.Unix(o.Updated, 0).UTC()
	if o.Updated == 0 {
		v.Updated = v.Created
	}
	return v, nil
}

// meteredPrice is what billing reads of a price a credit grant may cover.
type meteredPrice struct {
	ID       string
	Found    bool
	Currency string
	// UnitAmountDecimal is the price of DivideBy units, in the currency's
	// smallest unit ("" for a tiered price).
	UnitAmountDecimal string
	DivideBy          int64
	UsageType         string
	// EventName is the event name of the price's Billing Meter ("" when the
	// price has none).
	EventName string
}

// prefetchCreditPrices reads from Stripe, before the transaction, the
// prices a credit grant covers and their meters' event names.
func (s *Service) prefetchCreditPrices(ctx context.Context, raw json.RawMessage) (prefetched, error) {
	var pre prefetched
	v, err := parseCreditGrant(raw)
	if err != nil || !v.Monetary {
		return pre, nil // apply says why
	}
	prices := v.Prices
	if len(prices) == 0 && v.PriceType == "metered" && v.Customer != "" {
		if prices, err = s.ents.CustomerItemPrices(ctx, v.Customer); err != nil {
			return pre, err
		}
	}
	meters := map[string]string{} // meter id → event name
	for _, id := range prices {
		p, err := s.readMeteredPrice(ctx, id, meters)
		if err != nil {
			return pre, err
		}
		pre.creditPrices = append(pre.creditPrices, p)
	}
	pre.creditPricesRead = true
	return pre, nil
}

// readMeteredPrice is GET /v1/prices/{id} and, for a price on a Billing
// Meter, GET /v1/billing/meters/{meter} (once per meter: meters). The
// amount is read from the raw answer: stripe-go's float64 would round a
// decimal such as 0.0125.
func (s *Service) readMeteredPrice(ctx context.Context, id string, meters map[string]string) (meteredPrice, error) {
	out := meteredPrice{ID: id}
	ctx, cancel := context.WithTimeout(ctx, s.opts.StripeTimeout)
	defer cancel()
	params := &stripe.PriceParams{}
	params.Context = ctx
	got, err := s.stripe.Prices.Get(id, params)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			return out, nil
		}
		return out, fmt.Errorf("billing: read price %s from Stripe: %w", id, err)
	}
	if got.LastResponse == nil || len(got.LastResponse.RawJSON) == 0 {
		return out, fmt.Errorf("billing: read price %s from Stripe: empty answer", id)
	}
	var p struct {
		Currency          string  `json:"currency"`
		UnitAmountDecimal *string `json:"unit_amount_decimal"`
		Recurring         *struct {
			UsageType string  `json:"usage_type"`
			Meter     *string `json:"meter"`
		} `json:"recurring"`
		TransformQuantity *struct {
			DivideBy int64 `json:"divide_by"`
		} `json:"transform_quantity"`
	}
	if err := json.Unmarshal(got.LastResponse.RawJSON, &p); err != nil {
		return out, fmt.Errorf("billing: read price %s from Stripe: %w", id, err)
	}
	out.Found, out.Currency, out.DivideBy = true, strings.ToLower(p.Currency), 1
	if p.UnitAmountDecimal != nil {
		out.UnitAmountDecimal = *p.UnitAmountDecimal
	}
	if p.TransformQuantity != nil && p.TransformQuantity.DivideBy > 1 {
		out.DivideBy = p.TransformQuantity.DivideBy
	}
	if p.Recurring == nil || p.Recurring.Meter == nil || *p.Recurring.Meter == "" {
		if p.Recurring != nil {
			out.UsageType = p.Recurring.UsageType
		}
		return out, nil
	}
	out.UsageType = p.Recurring.UsageType
	meter := *p.Recurring.Meter
	if name, ok := meters[meter]; ok {
		out.EventName = name
		return out, nil
	}
	mp := &stripe.BillingMeterParams{}
	mp.Context = ctx
	m, err := s.stripe.BillingMeters.Get(meter, mp)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			meters[meter] = ""
			return out, nil
		}
		return out, fmt.Errorf("billing: read meter %s of price %s from Stripe: %w", meter, id, err)
	}
	meters[meter], out.EventName = m.EventName, m.EventName
	return out, nil
}

// coveredMeter is a meter a credit grant covers, at one price.
type coveredMeter struct {
	meter string
	price meteredPrice
	rate  *big.Rat // money (smallest unit) per unit
}

// creditUnits decides the units of each meter a credit grant buys; with
// none, skip and why say what stopped it.
func (s *Service) creditUnits(ctx context.Context, w *entitlements.Writes, tid string, v creditGrantView, pre prefetched) (units map[string]int64, skip, why string, err error) {
	switch {
	case v.AmountType != "monetary" || !v.Monetary:
		return nil, skipNotMonetary, fmt.Sprintf("its amount is of type %q; only monetary credit grants are mirrored (their value converts at a price)", v.AmountType), nil
	case v.Value <= 0:
		return nil, skipTooSmall, "its amount is not positive", nil
	case v.ItemsScoped && len(v.Prices) == 0:
		return nil, skipScope, "its scope names billable_items; only scopes by prices or price_type \"metered\" are mirrored", nil
	case len(v.Prices) == 0 && v.PriceType != "metered":
		return nil, skipScope, fmt.Sprintf("its scope names no price and price_type %q (only \"metered\")", v.PriceType), nil
	}
	planKey, err := w.Plan(ctx, tid)
	if err != nil {
		return nil, "", "", err
	}
	plan, err := s.cat.GetPlan(ctx, planKey)
	if err != nil {
		return nil, "", "", fmt.Errorf("billing: plan %s: %w", planKey, err)
	}
	if s.stripe == nil || !pre.creditPricesRead {
		return creditUnitsFromPlan(v, plan)
	}
	if len(pre.creditPrices) == 0 {
		return nil, skipUnmappedPrice, fmt.Sprintf("its scope is price_type %q and customer %s has no price on a live subscription", v.PriceType, v.Customer), nil
	}
	byEvent := map[string]string{}
	for m, q := range plan.Quotas {
		if q.StripeMeterEvent != "" {
			byEvent[q.StripeMeterEvent] = m
		}
	}
	var notes []string
	currencyOff := false
	covered := map[string]coveredMeter{}
	for _, p := range pre.creditPrices {
		rate, ok := new(big.Rat).SetString(p.UnitAmountDecimal)
		switch {
		case !p.Found:
			notes = append(notes, fmt.Sprintf("price %s is not in Stripe", p.ID))
			continue
		case p.EventName == "":
			if v.PriceType == "metered" && len(v.Prices) == 0 {
				continue // a licensed price of the subscription: not in a metered scope
			}
			notes = append(notes, fmt.Sprintf("price %s has no Billing Meter", p.ID))
			continue
		case byEvent[p.EventName] == "":
			notes = append(notes, fmt.Sprintf("price %s bills meter event %q, no quota's stripe_meter_event on plan %s", p.ID, p.EventName, planKey))
			continue
		case p.Currency != v.Currency:
			currencyOff = true
			notes = append(notes, fmt.Sprintf("price %s is in %s, the credit in %s", p.ID, p.Currency, v.Currency))
			continue
		case !ok || rate.Sign() <= 0:
			// A tiered price has no one unit amount: the quota's own, when
			// it sets one in the credit's currency, converts instead.
			if r := quotaRate(plan.Quotas[byEvent[p.EventName]], v.Currency); r != nil {
				rate, p.DivideBy = r, 1
				break
			}
			notes = append(notes, fmt.Sprintf("price %s has no positive unit_amount_decimal (tiered or free prices are converted only at the quota's unit_amount_decimal)", p.ID))
			continue
		}
		rate.Quo(rate, new(big.Rat).SetInt64(p.DivideBy))
		m := byEvent[p.EventName]
		// Two prices of one meter: the dearer one, which buys fewer units.
		if c, seen := covered[m]; !seen || rate.Cmp(c.rate) > 0 {
			covered[m] = coveredMeter{meter: m, price: p, rate: rate}
		}
	}
	if len(covered) == 0 {
		skip = skipUnmappedPrice
		if currencyOff {
			skip = skipCurrency
		}
		if len(notes) == 0 {
			notes = append(notes, fmt.Sprintf("customer %s has no metered price on a live subscription", v.Customer))
		}
		return nil, skip, "it covers no meter Tollgate maps: " + strings.Join(notes, "; "), nil
	}
	rates := make(map[string]*big.Rat, len(covered))
	for m, c := range covered {
		rates[m] = c.rate
	}
	return splitCredit(v, rates)
}

// quotaRate is a quota's unit_amount_decimal as money per unit, when it is
// in currency (nil otherwise).
func quotaRate(q catalogue.Quota, currency string) *big.Rat {
	if q.UnitAmountDecimal == "" || q.Currency != currency {
		return nil
	}
	r, ok := new(big.Rat).SetString(q.UnitAmountDecimal)
	if !ok || r.Sign() <= 0 {
		return nil
	}
	return r
}

// creditUnitsFromPlan converts a credit grant whose prices Tollgate cannot
// read from Stripe (no STRIPE_SECRET_KEY) at the unit_amount_decimal the
// plan's quotas set. Which meters a list of price ids bills is known only
// to Stripe, so such a scope needs metadata.tollgate_meter to name the one;
// price_type "metered" covers every quota priced in the credit's currency.
func creditUnitsFromPlan(v creditGrantView, plan catalogue.Plan) (map[string]int64, string, string, error) {
	rates := map[string]*big.Rat{}
	var otherCurrency []string
	for m, q := range plan.Quotas {
		if r := quotaRate(q, v.Currency); r != nil {
			rates[m] = r
		} else if q.UnitAmountDecimal != "" {
			otherCurrency = append(otherCurrency, m+" in "+q.Currency)
		}
	}
	one := v.Metadata[MetaCreditMeter]
	switch {
	case len(rates) == 0 && len(otherCurrency) > 0:
		slices.Sort(otherCurrency)
		return nil, skipCurrency, fmt.Sprintf("without STRIPE_SECRET_KEY it converts at the quotas' unit_amount_decimal, and plan %s prices none in %s (%s)",
			plan.Key, v.Currency, strings.Join(otherCurrency, ", ")), nil
	case len(rates) == 0:
		return nil, skipNoKey, fmt.Sprintf("reading the prices it covers (their meter and unit amount) needs STRIPE_SECRET_KEY, or a unit_amount_decimal on plan %s's quotas", plan.Key), nil
	case len(v.Prices) > 0 && one == "":
		return nil, skipNoKey, fmt.Sprintf("its scope names prices, whose meters only Stripe knows: without STRIPE_SECRET_KEY, metadata.%s must name the meter", MetaCreditMeter), nil
	}
	return splitCredit(v, rates)
}

// splitCredit turns a credit grant's value into units of the meters it
// covers (rates: money per unit of each), all on metadata.tollgate_meter
// when it names one, else split evenly.
func splitCredit(v creditGrantView, rates map[string]*big.Rat) (units map[string]int64, skip, why string, err error) {
	meters := make([]string, 0, len(rates))
	for m := range rates {
		meters = append(meters, m)
	}
	slices.Sort(meters)
	if one := v.Metadata[MetaCreditMeter]; one != "" {
		if _, ok := rates[one]; !ok {
			return nil, skipMeterChoice, fmt.Sprintf("metadata.%s is %q, not a meter it covers (%s)", MetaCreditMeter, one, strings.Join(meters, ", ")), nil
		}
		meters = []string{one}
	}
	// An even split, each share rounded down: the units never cost more
	// than the credit's value at the prices Stripe bills them.
	share := v.Value / int64(len(meters))
	units = map[string]int64{}
	for _, m := range meters {
		n := new(big.Rat).Quo(new(big.Rat).SetInt64(share), rates[m])
		u := new(big.Int).Quo(n.Num(), n.Denom()).Int64() // floor: both are positive
		if u > credits.MaxAmount {
			u = credits.MaxAmount
		}
		if u > 0 {
			units[m] = u
		}
	}
	if len(units) == 0 {
		return nil, skipTooSmall, fmt.Sprintf("%d %s buys less than one unit of %s", v.Value, v.Currency, strings.Join(meters, ", ")), nil
	}
	return units, "", "", nil
}

// skipped is an ignored credit grant event, counted by reason once its
// status is committed.
func skipped(reason, tenantID, format string, args ...any) outcome {
	o := ignored(tenantID, format, args...)
	o.creditSkip = reason
	return o
}

// applyCreditGrant mirrors a Stripe credit grant as the tenant's grants
// (created once per credit grant and meter), and follows its void and
// expiry. A credit grant that cannot be mirrored is ignored saying why,
// and counted: it is never retried, since no retry would change it.
func (s *Service) applyCreditGrant(ctx context.Context, w *entitlements.Writes, ev storedEvent, pre prefetched) (outcome, error) {
	if s.opts.Credits == nil {
		return skipped(skipNoCredits, "", "%s: credits are not configured", ev.Type), nil
	}
	v, err := parseCreditGrant(ev.Object)
	if err != nil {
		return skipped(skipBadPayload, "", "%v", err), nil
	}
	customer := v.Customer
	if customer == "" {
		customer = ev.Customer
	}
	tid := ""
	if customer != "" {
		if tid, err = w.TenantByCustomer(ctx, customer); err != nil {
			return outcome{}, err
		}
	}
	if tid == "" {
		return skipped(skipUnknownCustomer, "", "%s %s: no tenant has this stripe_customer_id (credit grant %s)", reasonUnknownCustomer, customer, v.ID), nil
	}
	units, skip, why, err := s.creditUnits(ctx, w, tid, v, pre)
	if err != nil {
		return outcome{}, err
	}
	// Priorities: Stripe's 0 (applied first) to 100 is Tollgate's scale
	// and order (drawn lowest first), so it is kept as it is; Stripe's
	// default is 50, as Tollgate's.
	prio := credits.DefaultPriority
	if v.Priority != nil && *v.Priority >= credits.MinPriority && *v.Priority <= credits.MaxPriority {
		prio = *v.Priority
	}
	eff := v.Created
	if v.EffectiveAt != nil {
		eff = *v.EffectiveAt
	}
	reason := "Stripe credit grant " + v.ID
	if v.Name != "" {
		reason += " (" + v.Name + ")"
	}
	// Even a credit grant that can no longer be converted (a price since
	// deleted, no key) voids or moves the grants mirrored before.
	res, err := s.opts.Credits.MirrorStripeCreditTx(ctx, w.Tx(), credits.StripeCredit{TenantID: tid, ID: v.ID, Units: units,
		Priority: prio, EffectiveAt: eff, ExpiresAt: v.ExpiresAt, Voided: v.VoidedAt != nil, Updated: v.Updated, Reason: reason})
	if err != nil {
		return outcome{}, err
	}
	if len(res.Grants) == 0 {
		if skip == "" {
			skip, why = skipUnmappedPrice, "no grant of this tenant mirrors it"
		}
		return skipped(skip, tid, "credit grant %s is not mirrored: %s", v.ID, why), nil
	}
	return outcome{status: StatusProcessed, tenantID: tid, publishGrants: res.Changed}, nil
}
