package catalogue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/internal/postgres"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

var (
	planKeyRe = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	meterRe   = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
)

// What a quota's Stripe meter is sent (Quota.StripeReport).
const (
	ReportOverage = "overage"
	ReportTotal   = "total"
)

// Limits a plan may carry; beyond them a number is a typo, not a plan.
const (
	maxRatePerSecond = 1e9
	maxNameLen       = 200
	maxFeatureLen    = 100
	maxFeatures      = 200
	maxQuotas        = 100
	maxWindows       = 10
	minWindowLength  = time.Second
	maxWindowLength  = 31 * 24 * time.Hour
)

var windowNameRe = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// Kinds of a plan's window limit (PlanWindow.Kind).
const (
	// WindowSliding estimates the last Length from two fixed windows
	// weighted by overlap (the limiter's Window).
	WindowSliding = "sliding"
	// WindowFixed counts from the window's start on Redis's clock; the
	// counter expires with the window.
	WindowFixed = "fixed"
)

// Plan is a stored plan. Rate nil and Concurrency nil mean unlimited; a meter
// without a quota is unlimited.
type Plan struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	// StripePriceID is the first of StripePriceIDs (the self-serve
	// default), kept in answers for clients of the one-price API.
	StripePriceID string `json:"stripe_price_id,omitempty"`
	// StripePriceIDs are every price that maps to the plan, the self-serve
	// default first.
	StripePriceIDs []string `json:"stripe_price_ids"`
	// StripeProductID, when set, maps every price of the product.
	StripeProductID string `json:"stripe_product_id,omitempty"`
	// PriceVersions pins prices to a version of the plan: a subscription
	// on such a price gets that version's limits (a legacy price).
	PriceVersions map[string]int64 `json:"price_versions,omitempty"`
	Rate          *limiter.Rate    `json:"rate"`
	Concurrency   *int64           `json:"concurrency"`
	Quotas        map[string]Quota `json:"quotas"`
	Features      []string         `json:"features"`
	// Windows are limits per window ("5,000 an hour") next to the rate,
	// in the order given.
	Windows   []PlanWindow `json:"windows"`
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
	// Version starts at 1 and grows by one on every edit (PatchPlan), so
	// that an explanation of a tenant's limits can name the plan as it was.
	Version int64 `json:"version"`
	// QuotaWindow is how quotas reset: "month" (monthly on the billing
	// anchor day, even on a yearly price) or "billing_period".
	QuotaWindow string `json:"quota_window"`
	// Public plans (with a Stripe price) are offered to tenants on their
	// dashboard; internal ones are assigned by an admin only.
	Public bool `json:"public"`
}

// Quota is a plan's monthly limit of one meter.
type Quota struct {
	Limit int64  `json:"limit"`
	Mode  string `json:"mode"` // limiter.ModeHard or limiter.ModeSoft
	// StripeMeterEvent is the Stripe Billing Meter event name that overage
	// of this meter is reported to; "" = not reported.
	StripeMeterEvent string `json:"stripe_meter_event,omitempty"`
	// StripeReport is what the meter is sent: "overage" (usage above
	// Limit, the default) or "total" (all usage).
	StripeReport string `json:"stripe_report,omitempty"`
	// PerSeat: Limit is per seat, multiplied by the quantity of the
	// subscription's plan item.
	PerSeat bool `json:"per_seat,omitempty"`
	// Rollover, when set, turns units of the quota left unused at a
	// period's close into a rollover grant (credits).
	Rollover *Rollover `json:"rollover,omitempty"`
	// Notify are the thresholds that send quota.threshold webhooks;
	// empty = the default, 80% and 100%.
	Notify []keyspace.QuotaThreshold `json:"notify,omitempty"`
	// UnitAmountDecimal is what one unit of the meter costs, in Currency's
	// smallest unit (Stripe's unit_amount_decimal): a Stripe credit grant
	// is converted at it when its price cannot be read from Stripe (no
	// key, or a tiered price). "" = none.
	UnitAmountDecimal string `json:"unit_amount_decimal,omitempty"`
	Currency          string `json:"currency,omitempty"`
}

// Rollover of a quota: at most Max unused units of a closed period become a
// grant lasting ExpiresAfterPeriods periods.
type Rollover struct {
	Max                 int64 `json:"max"`
	ExpiresAfterPeriods int   `json:"expires_after_periods"`
}

// RolloverInput is a quota's "rollover" in the admin API.
type RolloverInput struct {
	Max                 *int64 `json:"max"`
	ExpiresAfterPeriods *int   `json:"expires_after_periods"` // default 1
}

// Rollover bounds.
const (
	MaxRolloverUnits   = 1_000_000_000_000
	MaxRolloverPeriods = 12
)

// PlanWindow is a window limit of a plan: at most Limit units in Length.
type PlanWindow struct {
	Name   string `json:"name"`
	Limit  int64  `json:"limit"`
	Length string `json:"length"` // a Go duration, e.g. "1h"
	Kind   string `json:"kind"`   // WindowSliding or WindowFixed
}

// Duration is Length parsed (validated on input, so never an error for a
// stored window).
func (w PlanWindow) Duration() time.Duration {
	d, _ := time.ParseDuration(w.Length)
	return d
}

// WindowInput is one window of a plan body; Kind defaults to sliding.
type WindowInput struct {
	Name   string `json:"name"`
	Limit  *int64 `json:"limit"`
	Length string `json:"length"`
	Kind   string `json:"kind"`
}

// WindowInputs is a plan body's windows. A patch replaces the list whole
// (RFC 7396 merges objects, not arrays): decoding into the stored list's
// elements would keep the fields an entry leaves out.
type WindowInputs []WindowInput

// UnmarshalJSON decodes into a fresh list (see WindowInputs), entry by
// entry, so that a wrong type or an unknown field is an Invalid error
// naming the entry (windows[1].limit), as validation names them.
func (w *WindowInputs) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*w = nil
		return nil
	}
	fresh := make(WindowInputs, len(raw))
	for i, r := range raw {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		err := dec.Decode(&fresh[i])
		var typ *json.UnmarshalTypeError
		switch {
		case err == nil:
		case errors.As(err, &typ):
			field := fmt.Sprintf("windows[%d]", i)
			if typ.Field != "" {
				field += "." + typ.Field
			}
			return apperr.Invalidf(field, "must be %s, not %s", typ.Type.String(), typ.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return apperr.Invalidf(fmt.Sprintf("windows[%d].%s", i, name), "unknown field")
		default:
			return err
		}
	}
	*w = fresh
	return nil
}

// PlanInput is the body of a plan create (and, merged onto the stored plan,
// of a patch). Pointers tell "absent" from zero.
type PlanInput struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	// StripePriceID is the one-price form of StripePriceIDs, accepted for
	// one release: when set it stands for stripe_price_ids [it] (unless
	// the list starts with it already).
	StripePriceID   string   `json:"stripe_price_id"`
	StripePriceIDs  []string `json:"stripe_price_ids"`
	StripeProductID string   `json:"stripe_product_id"`
	// PriceVersions pins some of the prices to a version of the plan.
	PriceVersions map[string]int64 `json:"price_versions"`
	// Apply (PATCH only) is whom an edit reaches: ApplyAll (default), or
	// ApplyNew, which keeps the tenants on the plan on their version.
	Apply string `json:"apply"`
	// legacyPrice: the prices came from stripe_price_id, which errors name.
	legacyPrice bool
	Rate        *RateInput             `json:"rate"`        // nil = unlimited
	Concurrency *int64                 `json:"concurrency"` // nil or 0 = unlimited
	Quotas      map[string]*QuotaInput `json:"quotas"`      // a nil entry removes the meter
	Features    []string               `json:"features"`
	Windows     WindowInputs           `json:"windows"`      // replaced whole by a patch
	QuotaWindow string                 `json:"quota_window"` // "" = month
	Public      *bool                  `json:"public"`       // nil = true (offered to tenants)
}

// RateInput is a token bucket: PerSecond refill, Burst capacity (default:
// PerSecond rounded up).
type RateInput struct {
	PerSecond *float64 `json:"per_second"`
	Burst     *int64   `json:"burst"`
}

// QuotaInput is one meter's monthly quota; Mode defaults to hard.
type QuotaInput struct {
	Limit            *int64 `json:"limit"`
	Mode             string `json:"mode"`
	StripeMeterEvent string `json:"stripe_meter_event"`
	StripeReport     string `json:"stripe_report"` // "" = overage
	PerSeat          bool   `json:"per_seat"`      // limit × the plan item's quantity
	// Rollover: unused units at a period's close become a grant; nil none.
	Rollover *RolloverInput `json:"rollover"`
	// Notify: thresholds of quota.threshold webhooks, each a percentage
	// (80) or {"percent": 80} / {"units": 5000}; empty = 80% and 100%.
	Notify []NotifyInput `json:"notify"`
	// UnitAmountDecimal and Currency price one unit (see Quota).
	UnitAmountDecimal string `json:"unit_amount_decimal"`
	Currency          string `json:"currency"`
}

// PlanPatch changes a plan in place: PatchPlan hands it the stored plan as a
// PlanInput inside the transaction that saves the result, so two patches
// never lose each other's changes. The HTTP handler decodes the request body
// onto it, which gives JSON merge-patch semantics (RFC 7396).
type PlanPatch func(in *PlanInput) error

// Validate checks every field and reports all bad ones at once, each named
// the way the JSON body names it (e.g. "quotas.requests.limit").
func (in *PlanInput) Validate() error {
	var v apperr.Validation
	if !ValidPlanKey(in.Key) {
		v.Add("key", "must match [a-z0-9_-]{1,64}")
	}
	if !apperr.CleanText(in.Name) {
		v.Add("name", "must be UTF-8 text without control characters")
	} else if n := len([]rune(in.Name)); n > maxNameLen {
		v.Add("name", "must be at most %d characters", maxNameLen)
	} else if strings.TrimSpace(in.Name) == "" && in.Name != "" {
		v.Add("name", "must not be blank")
	}
	if len(in.StripePriceID) > 255 || !apperr.Token(in.StripePriceID) {
		v.Add("stripe_price_id", "must be a Stripe price id such as price_123")
	}
	validatePrices(&v, in.prices(), in.StripeProductID)
	if in.Apply != "" && in.Apply != ApplyAll && in.Apply != ApplyNew {
		v.Add("apply", `must be "all" or "new"`)
	}
	if r := in.Rate; r != nil {
		switch {
		case r.PerSecond == nil:
			v.Add("rate.per_second", "is required when rate is given")
		case math.IsNaN(*r.PerSecond) || *r.PerSecond <= 0 || *r.PerSecond > maxRatePerSecond:
			v.Add("rate.per_second", "must be greater than 0 and at most %g", float64(maxRatePerSecond))
		}
		if r.Burst != nil && *r.Burst < 1 {
			v.Add("rate.burst", "must be at least 1")
		}
	}
	if in.Concurrency != nil && *in.Concurrency < 0 {
		v.Add("concurrency", "must not be negative (0 or absent means unlimited)")
	}
	if len(in.Quotas) > maxQuotas {
		v.Add("quotas", "must have at most %d meters", maxQuotas)
	}
	for _, meter := range slices.Sorted(maps.Keys(in.Quotas)) {
		q := in.Quotas[meter]
		field := "quotas." + meter
		if !meterRe.MatchString(meter) {
			v.Add(field, "meter name must match [a-z0-9_.-]{1,64}")
			continue
		}
		if q == nil {
			continue
		}
		switch {
		case q.Limit == nil:
			v.Add(field+".limit", "is required")
		case *q.Limit < 0:
			v.Add(field+".limit", "must not be negative")
		}
		if q.Mode != "" && q.Mode != string(limiter.ModeHard) && q.Mode != string(limiter.ModeSoft) {
			v.Add(field+".mode", `must be "hard" or "soft"`)
		}
		ValidateNotify(&v, field+".notify", q.Notify)
		if len(q.StripeMeterEvent) > 100 || !apperr.Token(q.StripeMeterEvent) {
			v.Add(field+".stripe_meter_event", "must be a Stripe meter event name without spaces")
		}
		if q.StripeReport != "" && q.StripeReport != ReportOverage && q.StripeReport != ReportTotal {
			v.Add(field+".stripe_report", `must be "overage" or "total"`)
		}
		validateUnitPrice(&v, field, q.UnitAmountDecimal, q.Currency)
		if r := q.Rollover; r != nil {
			switch {
			case r.Max == nil:
				v.Add(field+".rollover.max", "is required: the most unused units one period rolls over")
			case *r.Max < 1 || *r.Max > MaxRolloverUnits:
				v.Add(field+".rollover.max", "must be from 1 to %d", int64(MaxRolloverUnits))
			}
			if p := r.ExpiresAfterPeriods; p != nil && (*p < 1 || *p > MaxRolloverPeriods) {
				v.Add(field+".rollover.expires_after_periods", "must be from 1 to %d", MaxRolloverPeriods)
			}
		}
	}
	validateWindows(&v, in.Windows, in.Quotas)
	if !period.Window(in.QuotaWindow).Valid() {
		v.Add("quota_window", `must be "month" or "billing_period"`)
	}
	if len(in.Features) > maxFeatures {
		v.Add("features", "must have at most %d entries", maxFeatures)
	}
	for i, f := range in.Features {
		if f == "" || len(f) > maxFeatureLen || !apperr.Token(f) {
			v.Add(fmt.Sprintf("features[%d]", i), "must be 1-%d characters without spaces", maxFeatureLen)
		}
	}
	return v.Err()
}

// validateWindows checks each window, naming fields as windows[i].name.
func validateWindows(v *apperr.Validation, ws []WindowInput, quotas map[string]*QuotaInput) {
	if len(ws) > maxWindows {
		v.Add("windows", "must have at most %d entries", maxWindows)
	}
	seen := make(map[string]bool, len(ws))
	for i, w := range ws {
		field := fmt.Sprintf("windows[%d]", i)
		switch {
		case !windowNameRe.MatchString(w.Name):
			v.Add(field+".name", "must match [a-z0-9_-]{1,32}")
		case seen[w.Name]:
			v.Add(field+".name", "must be unique in the plan (%q is given twice)", w.Name)
		case w.Name == keyspace.PolicyRate || w.Name == keyspace.PolicyConcurrency:
			// A window named like the rate would be told apart from it in
			// no header or refusal.
			v.Add(field+".name", "must not be %q (a policy of its own)", w.Name)
		case quotas[w.Name] != nil:
			// Decisions and headers name a window and a quota alike.
			v.Add(field+".name", "must not be the name of a quota of the plan (%q)", w.Name)
		}
		seen[w.Name] = true
		switch {
		case w.Limit == nil:
			v.Add(field+".limit", "is required")
		case *w.Limit <= 0:
			v.Add(field+".limit", "must be greater than 0")
		}
		if d, err := time.ParseDuration(w.Length); err != nil {
			v.Add(field+".length", `must be a duration such as "1m" or "24h"`)
		} else if d < minWindowLength || d > maxWindowLength {
			v.Add(field+".length", "must be between 1s and 744h (31 days)")
		}
		if w.Kind != "" && w.Kind != WindowSliding && w.Kind != WindowFixed {
			v.Add(field+".kind", `must be "sliding" or "fixed"`)
		}
	}
}

// prices is stripe_price_ids with the legacy stripe_price_id applied.
func (in *PlanInput) prices() []string {
	if in.StripePriceID != "" && (len(in.StripePriceIDs) == 0 || in.StripePriceIDs[0] != in.StripePriceID) {
		return []string{in.StripePriceID}
	}
	return in.StripePriceIDs
}

// priceField is the field a price error names: the one the client sent.
func (in *PlanInput) priceField() string {
	if in.legacyPrice {
		return "stripe_price_id"
	}
	return "stripe_price_ids"
}

// normalized fills defaults: name from key, burst from rate, hard mode,
// features sorted and unique, removed quotas dropped.
func (in PlanInput) normalized() PlanInput {
	out := in
	out.legacyPrice = in.StripePriceID != "" && (len(in.StripePriceIDs) == 0 || in.StripePriceIDs[0] != in.StripePriceID)
	out.StripePriceIDs = append([]string{}, in.prices()...)
	out.StripePriceID = ""
	if len(out.StripePriceIDs) > 0 {
		out.StripePriceID = out.StripePriceIDs[0]
	}
	out.Name = strings.TrimSpace(out.Name)
	if out.Name == "" {
		out.Name = out.Key
	}
	if in.Rate != nil {
		r := *in.Rate
		if r.Burst == nil {
			b := int64(math.Max(1, math.Ceil(*r.PerSecond)))
			r.Burst = &b
		}
		out.Rate = &r
	}
	if out.Concurrency != nil && *out.Concurrency == 0 {
		out.Concurrency = nil
	}
	out.Quotas = make(map[string]*QuotaInput, len(in.Quotas))
	for m, q := range in.Quotas {
		if q == nil {
			continue
		}
		qq := *q
		if qq.Mode == "" {
			qq.Mode = string(limiter.ModeHard)
		}
		if qq.StripeReport == "" {
			qq.StripeReport = ReportOverage
		}
		qq.Currency = strings.ToLower(qq.Currency)
		out.Quotas[m] = &qq
	}
	out.Features = uniqueSorted(in.Features)
	out.Windows = make(WindowInputs, len(in.Windows))
	for i, w := range in.Windows {
		if w.Kind == "" {
			w.Kind = WindowSliding
		}
		// Stored as the duration's canonical form ("60m" → "1h"), so
		// that equal windows read back equal.
		w.Length = WindowLength(w.Length)
		out.Windows[i] = w
	}
	if out.QuotaWindow == "" {
		out.QuotaWindow = string(period.Month)
	}
	if out.Public == nil {
		// Absent (or null in a patch): offered, as every plan was before
		// the field existed.
		public := true
		out.Public = &public
	}
	return out
}

// Input is the plan as a PlanInput, the starting point of a patch.
func (p Plan) Input() PlanInput {
	public := p.Public
	in := PlanInput{Key: p.Key, Name: p.Name, StripePriceIDs: append([]string{}, p.StripePriceIDs...), StripeProductID: p.StripeProductID,
		PriceVersions: maps.Clone(p.PriceVersions),
		Features:      append([]string(nil), p.Features...),
		QuotaWindow:   p.QuotaWindow, Public: &public}
	if p.Rate != nil {
		ps, b := p.Rate.PerSecond, p.Rate.Burst
		in.Rate = &RateInput{PerSecond: &ps, Burst: &b}
	}
	if p.Concurrency != nil {
		c := *p.Concurrency
		in.Concurrency = &c
	}
	for _, w := range p.Windows {
		l := w.Limit
		in.Windows = append(in.Windows, WindowInput{Name: w.Name, Limit: &l, Length: w.Length, Kind: w.Kind})
	}
	in.Quotas = make(map[string]*QuotaInput, len(p.Quotas))
	for m, q := range p.Quotas {
		l := q.Limit
		in.Quotas[m] = &QuotaInput{Limit: &l, Mode: q.Mode, StripeMeterEvent: q.StripeMeterEvent, StripeReport: q.StripeReport, PerSeat: q.PerSeat, Notify: notifyInputs(q.Notify),
			UnitAmountDecimal: q.UnitAmountDecimal, Currency: q.Currency}
		if r := q.Rollover; r != nil {
			mx, n := r.Max, r.ExpiresAfterPeriods
			in.Quotas[m].Rollover = &RolloverInput{Max: &mx, ExpiresAfterPeriods: &n}
		}
	}
	return in
}

// CreatePlan stores a new plan. A duplicate key or Stripe price id is a
// Conflict naming the field.
func (s *Service) CreatePlan(ctx context.Context, in PlanInput) (Plan, error) {
	if err := in.Validate(); err != nil {
		return Plan{}, err
	}
	in = in.normalized()
	var p Plan
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := insertPlan(ctx, tx, in); err != nil {
			return err
		}
		var err error
		p, err = getPlan(ctx, tx, in.Key, false)
		return err
	})
	if err != nil {
		return Plan{}, fmt.Errorf("catalogue: create plan: %w", err)
	}
	s.log.InfoContext(ctx, "plan created", "plan", p.Key)
	return p, nil
}

// ListPlans returns every plan, ordered by key.
func (s *Service) ListPlans(ctx context.Context) ([]Plan, error) {
	rows, err := s.db.Query(ctx, planSelect+` ORDER BY p.key`)
	if err != nil {
		return nil, fmt.Errorf("catalogue: list plans: %w", err)
	}
	plans, err := pgx.CollectRows(rows, scanPlan)
	if err != nil {
		return nil, fmt.Errorf("catalogue: list plans: %w", err)
	}
	if plans == nil {
		plans = []Plan{}
	}
	return plans, nil
}

// GetPlan returns one plan; NotFound when there is none.
func (s *Service) GetPlan(ctx context.Context, key string) (Plan, error) {
	p, err := getPlan(ctx, s.db, key, false)
	if err != nil {
		return Plan{}, fmt.Errorf("catalogue: get plan: %w", err)
	}
	return p, nil
}

// PatchPlan applies patch to the stored plan and saves the result; every
// tenant the plan reaches gets a new entitlement version in the same
// transaction (Options.Touch) and its snapshot once committed, so that it
// gets the new limits at once.
func (s *Service) PatchPlan(ctx context.Context, key string, patch PlanPatch) (Plan, error) {
	var (
		p       Plan
		touched Touched
	)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var (
			r   Reach
			err error
		)
		if _, p, r, err = patchPlanTx(ctx, tx, key, patch); err != nil {
			return err
		}
		touched, err = s.touch(ctx, tx, r)
		return err
	})
	if err != nil {
		return Plan{}, fmt.Errorf("catalogue: patch plan: %w", err)
	}
	s.log.InfoContext(ctx, "plan changed", "plan", key, "tenants", len(touched.Tenants))
	committed(ctx, touched)
	return p, nil
}

// patchPlanTx applies patch to the stored plan inside tx and returns the plan
// before and after and whom the edit reaches (PatchPlan and its preview).
func patchPlanTx(ctx context.Context, tx pgx.Tx, key string, patch PlanPatch) (before, after Plan, r Reach, err error) {
	if before, err = getPlan(ctx, tx, key, true); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	in := before.Input()
	if err := patch(&in); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	if in.Key != key {
		return Plan{}, Plan{}, Reach{}, apperr.Invalidf("key", "cannot be changed (the plan is %q)", key)
	}
	if err := in.Validate(); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	in = in.normalized()
	// Every version tenants or prices may keep has its record; with
	// "apply": "new" the tenants on the plan keep this one (Reach.Keep).
	if err := saveVersion(ctx, tx, before); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	r = Reach{Plan: key, Reason: "plan " + key + " changed"}
	if in.Apply == ApplyNew {
		r.Keep = before.Version
	}
	if err := updatePlan(ctx, tx, in); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	if err := savePriceVersions(ctx, tx, in.Key, in.PriceVersions, before.Version+1); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	if after, err = getPlan(ctx, tx, key, false); err != nil {
		return Plan{}, Plan{}, Reach{}, err
	}
	return before, after, r, nil
}

const planSelect = `
SELECT p.key, p.name, coalesce(p.stripe_price_id, ''),
       coalesce((SELECT array_agg(c.stripe_price_id ORDER BY c.position) FROM catalogue_prices c WHERE c.plan_key = p.key), '{}'),
       coalesce((SELECT c.stripe_product_id FROM catalogue_products c WHERE c.plan_key = p.key), ''),
       (SELECT jsonb_object_agg(c.stripe_price_id, c.plan_version) FROM catalogue_prices c WHERE c.plan_key = p.key AND c.plan_version IS NOT NULL),
       p.rate_per_second, p.rate_burst, p.concurrency,
       p.features, p.quota_window, p.public, p.created_at, p.updated_at, p.version,
       coalesce((SELECT jsonb_object_agg(q.meter, jsonb_build_object('limit', q.quota_limit, 'mode', q.mode,
                        'stripe_meter_event', coalesce(q.stripe_meter_event, ''), 'stripe_report', q.stripe_report,
                        'per_seat', q.per_seat, 'notify', q.notify,
                        'unit_amount_decimal', coalesce(q.unit_amount_decimal, ''), 'currency', coalesce(q.currency, ''))
                        || coalesce(jsonb_build_object('rollover', q.rollover), '{}'::jsonb))
                   FROM plan_quotas q WHERE q.plan_key = p.key), '{}'::jsonb),
       p.windows
  FROM plans p`

func scanPlan(row pgx.CollectableRow) (Plan, error) {
	var (
		p     Plan
		rps   *float64
		burst *int64
	)
	if err := row.Scan(&p.Key, &p.Name, &p.StripePriceID, &p.StripePriceIDs, &p.StripeProductID, &p.PriceVersions, &rps, &burst, &p.Concurrency, &p.Features,
		&p.QuotaWindow, &p.Public, &p.CreatedAt, &p.UpdatedAt, &p.Version, &p.Quotas, &p.Windows); err != nil {
		return Plan{}, err
	}
	if rps != nil && burst != nil {
		p.Rate = &limiter.Rate{PerSecond: *rps, Burst: *burst}
	}
	if p.Features == nil {
		p.Features = []string{}
	}
	if p.StripePriceIDs == nil {
		p.StripePriceIDs = []string{}
	}
	if p.Quotas == nil {
		p.Quotas = map[string]Quota{}
	}
	if p.Windows == nil {
		p.Windows = []PlanWindow{}
	}
	return p, nil
}

func getPlan(ctx context.Context, q postgres.Querier, key string, lock bool) (Plan, error) {
	if !ValidPlanKey(key) {
		return Plan{}, apperr.New(apperr.NotFound, "no plan %q", key)
	}
	sql := planSelect + ` WHERE p.key = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE OF p` // does not block FK checks of tenants
	}
	rows, err := q.Query(ctx, sql, key)
	if err != nil {
		return Plan{}, err
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPlan)
	if errors.Is(err, pgx.ErrNoRows) {
		return Plan{}, apperr.New(apperr.NotFound, "no plan %q", key)
	}
	return p, err
}

func insertPlan(ctx context.Context, tx pgx.Tx, in PlanInput) error {
	rps, burst := rateCols(in.Rate)
	_, err := tx.Exec(ctx, `
INSERT INTO plans (key, name, stripe_price_id, rate_per_second, rate_burst, concurrency, features, quota_window, public, windows)
VALUES ($1, $2, NULL, $3, $4, $5, $6, $7, $8, $9)`,
		in.Key, in.Name, rps, burst, in.Concurrency, in.Features, in.QuotaWindow, *in.Public, in.storedWindows())
	if err != nil {
		return pgError(err)
	}
	// The prices are checked (and a price mapped twice named) before the
	// default price goes into plans.stripe_price_id, the one-price column
	// that older readers and the self-serve default use.
	if err := savePrices(ctx, tx, owner{plan: in.Key}, in.priceField(), in.StripePriceIDs, in.StripeProductID); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE plans SET stripe_price_id = nullif($2, '') WHERE key = $1`, in.Key, in.StripePriceID); err != nil {
		return pgError(err)
	}
	if err := savePriceVersions(ctx, tx, in.Key, in.PriceVersions, 1); err != nil {
		return err
	}
	return insertQuotas(ctx, tx, in)
}

func updatePlan(ctx context.Context, tx pgx.Tx, in PlanInput) error {
	if err := savePrices(ctx, tx, owner{plan: in.Key}, in.priceField(), in.StripePriceIDs, in.StripeProductID); err != nil {
		return err
	}
	rps, burst := rateCols(in.Rate)
	_, err := tx.Exec(ctx, `
UPDATE plans SET name = $2, stripe_price_id = nullif($3, ''), rate_per_second = $4, rate_burst = $5,
       concurrency = $6, features = $7, quota_window = $8, public = $9, windows = $10, updated_at = now(), version = version + 1
 WHERE key = $1`,
		in.Key, in.Name, in.StripePriceID, rps, burst, in.Concurrency, in.Features, in.QuotaWindow, *in.Public, in.storedWindows())
	if err != nil {
		return pgError(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM plan_quotas WHERE plan_key = $1`, in.Key); err != nil {
		return pgError(err)
	}
	return insertQuotas(ctx, tx, in)
}

func insertQuotas(ctx context.Context, tx pgx.Tx, in PlanInput) error {
	for _, m := range slices.Sorted(maps.Keys(in.Quotas)) {
		q := in.Quotas[m]
		_, err := tx.Exec(ctx, `
INSERT INTO plan_quotas (plan_key, meter, quota_limit, mode, stripe_meter_event, stripe_report, per_seat, notify, rollover,
                         unit_amount_decimal, currency)
VALUES ($1, $2, $3, $4, nullif($5, ''), $6, $7, $8, $9, nullif($10, ''), nullif($11, ''))`, in.Key, m, *q.Limit, q.Mode, q.StripeMeterEvent,
			q.StripeReport, q.PerSeat, notifyJSON(Thresholds(q.Notify)), rolloverOf(q.Rollover), q.UnitAmountDecimal, q.Currency)
		if err != nil {
			return pgError(err)
		}
	}
	return nil
}

// storedWindows is the windows column of a normalized input.
func (in *PlanInput) storedWindows() []PlanWindow {
	out := make([]PlanWindow, len(in.Windows))
	for i, w := range in.Windows {
		out[i] = PlanWindow{Name: w.Name, Limit: *w.Limit, Length: w.Length, Kind: w.Kind}
	}
	return out
}

// WindowLength is a valid duration in the canonical form windows are
// stored in ("1h", not "1h0m0s"; explanations show it alike).
func WindowLength(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil {
		return s
	}
	// "1h0m0s" reads better as "1h".
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

func rateCols(r *RateInput) (*float64, *int64) {
	if r == nil {
		return nil, nil
	}
	return r.PerSecond, r.Burst
}

// uniqueSorted is in sorted, each value once: a new slice, never nil
// (stored in a NOT NULL array column, shown as []).
func uniqueSorted(in []string) []string {
	out := append([]string{}, in...)
	slices.Sort(out)
	return slices.Compact(out)
}

// rolloverOf is the stored form of a quota's rollover (nil: none).
func rolloverOf(in *RolloverInput) *Rollover {
	if in == nil || in.Max == nil {
		return nil
	}
	r := &Rollover{Max: *in.Max, ExpiresAfterPeriods: 1}
	if in.ExpiresAfterPeriods != nil {
		r.ExpiresAfterPeriods = *in.ExpiresAfterPeriods
	}
	return r
}

// unitAmountRe is Stripe's unit_amount_decimal: at most 12 decimal places.
var unitAmountRe = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,12})?$`)

// validateUnitPrice checks a quota's unit price: both fields or neither, a
// positive decimal and an ISO 4217 code.
func validateUnitPrice(v *apperr.Validation, field, amount, currency string) {
	switch {
	case amount == "" && currency != "":
		v.Add(field+".unit_amount_decimal", "is required with currency")
	case amount == "":
	case !unitAmountRe.MatchString(amount) || strings.Trim(amount, "0.") == "":
		v.Add(field+".unit_amount_decimal", `must be a positive decimal with at most 12 decimal places, in the currency's smallest unit (such as "2.5" cents)`)
	}
	if amount != "" && !currencyRe.MatchString(strings.ToLower(currency)) {
		v.Add(field+".currency", "must be a three-letter ISO 4217 code (such as usd) when unit_amount_decimal is set")
	}
}

var currencyRe = regexp.MustCompile(`^[a-z]{3}$`)
