package entitlements

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/numfmt"
	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// "Why this limit" (issue 14): every figure the limiter enforces, with what
// set it. compute records the sources as it decides each figure, and the
// figures themselves are read from the snapshot that same call returned, so
// an explanation can only ever describe what is enforced.

// Policies of an explanation's limits, as the limiter names them.
const (
	PolicyRate        = "rate"
	PolicyConcurrency = "concurrency"
)

// QuotaPolicy is the policy name of a meter's quota: "quota:<meter>".
func QuotaPolicy(meter string) string { return "quota:" + meter }

// Kinds of source.
const (
	// SourcePlan is the tenant's own plan (key and version).
	SourcePlan = "plan"
	// SourceFallback is the default plan, applied because the subscription
	// grants no paid access; Reason says why.
	SourceFallback = "default_plan_fallback"
	// SourceSubscription is the subscription that decided which plan
	// applies: its status, grace end and the Stripe event that set it.
	SourceSubscription = "subscription"
	// SourceSeats is the quantity of the plan item a per-seat quota is
	// multiplied by.
	SourceSeats = "seats"
	// SourceAddon is an add-on item of the subscription.
	SourceAddon = "addon"
	// SourceOverride is an admin's quota override (unexpired).
	SourceOverride = "override"
)

// Explanation is a tenant's enforced limits, each with its sources.
type Explanation struct {
	TenantID   string `json:"tenant_id"`
	TenantName string `json:"tenant_name"`
	// TenantPlan is the plan the tenant is on; Plan the one enforced (the
	// default plan after a fallback).
	TenantPlan string `json:"tenant_plan"`
	Plan       string `json:"plan"`
	Status     string `json:"status"`
	// Version is the tenant's entitlement version the figures belong to.
	Version     int64     `json:"version"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	ComputedAt  time.Time `json:"computed_at"`
	// Limits: rate, concurrency, the plan's windows in its order, then one
	// quota per meter by name.
	Limits []Limit `json:"limits"`
	// Snapshot is what the figures were read from (the one compute call).
	Snapshot limiter.Snapshot `json:"-"`
}

// Limit is one enforced figure. Unlimited, or Rate (rate), Limit
// (concurrency slots, quota units) and Mode (quotas).
type Limit struct {
	Policy    string        `json:"policy"`
	Meter     string        `json:"meter,omitempty"`
	Unlimited bool          `json:"unlimited"`
	Rate      *limiter.Rate `json:"rate,omitempty"`
	Limit     *int64        `json:"limit,omitempty"`
	Mode      string        `json:"mode,omitempty"`
	// Window, Length and Kind describe a plan window (policy
	// "window:<name>"): its name, length ("1h0m0s") and kind.
	Window string `json:"window,omitempty"`
	Length string `json:"length,omitempty"`
	Kind   string `json:"kind,omitempty"`
	// Sources in the order they were applied; each Result is the figure
	// after it, so the last one that changed it equals Limit.
	Sources []Source `json:"sources"`
}

// Source is one thing that decided (or, Ignored, did not change) a limit.
// Fields beyond Kind and Detail are set as the kind has them.
type Source struct {
	Kind string `json:"kind"`
	// Detail says it in one sentence for people.
	Detail string `json:"detail"`
	// Result is the figure after this source; nil when it sets no number.
	Result *int64 `json:"result,omitempty"`
	// Ignored: the source exists but changes nothing (an add-on or extra
	// on a meter the plan leaves unlimited, add-ons after a fallback).
	Ignored bool `json:"ignored,omitempty"`

	PlanKey     string `json:"plan,omitempty"`
	PlanVersion int64  `json:"plan_version,omitempty"`

	SubscriptionID string     `json:"subscription_id,omitempty"`
	Status         string     `json:"status,omitempty"`
	GraceEnd       *time.Time `json:"grace_end,omitempty"`
	StripeEventID  string     `json:"stripe_event_id,omitempty"`

	StripePriceID string `json:"stripe_price_id,omitempty"`
	Name          string `json:"name,omitempty"`
	Quantity      *int64 `json:"quantity,omitempty"`

	OverrideID string     `json:"override_id,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	CreatedBy  string     `json:"created_by,omitempty"`
	// Reason is an override's reason, or why the default plan applies.
	Reason string `json:"reason,omitempty"`
}

// Explain explains the tenant's enforced limits, read in one consistent
// view of Postgres. An unknown tenant, or a malformed id, is NotFound.
// (What a plan change would do is PreviewPlanChange's: the change itself,
// rolled back.)
func (s *Service) Explain(ctx context.Context, tenantID string) (Explanation, error) {
	if !ids.IsUUID(tenantID) {
		// As every admin route of a tenant answers it: no such tenant.
		return Explanation{}, tenantNotFound(tenantID)
	}
	var (
		in   inputs
		snap limiter.Snapshot
		why  = newExplainer()
	)
	err := pgx.BeginTxFunc(ctx, s.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if in, err = loadInputs(ctx, tx, tenantID); err != nil {
			return err
		}
		if err := s.fill(ctx, tx, &in); err != nil {
			return err
		}
		snap = s.compute(in, why)
		return nil
	})
	if err != nil {
		return Explanation{}, fmt.Errorf("entitlements: explain: %w", err)
	}
	e := Explanation{
		TenantID: in.tenant.ID, TenantName: in.tenant.Name, TenantPlan: in.tenant.Plan,
		Plan: snap.Plan, Status: snap.Status, Version: snap.Version,
		PeriodStart: snap.PeriodStart, PeriodEnd: snap.PeriodEnd,
		ComputedAt: in.now, Snapshot: snap,
	}
	e.Limits = why.limits(snap, in)
	return e, nil
}

// AttributeOverrides sets CreatedBy on the override sources from by
// (override id → who created it), which the audit trail knows and this
// package does not read.
func (e *Explanation) AttributeOverrides(by map[string]string) {
	for i := range e.Limits {
		for j := range e.Limits[i].Sources {
			src := &e.Limits[i].Sources[j]
			if src.Kind == SourceOverride && by[src.OverrideID] != "" {
				src.CreatedBy = by[src.OverrideID]
			}
		}
	}
}

// OverrideIDs lists the overrides the explanation names.
func (e *Explanation) OverrideIDs() []string {
	var out []string
	for _, l := range e.Limits {
		for _, src := range l.Sources {
			if src.Kind == SourceOverride {
				out = append(out, src.OverrideID)
			}
		}
	}
	return out
}

// explainer records, during compute, the source of each figure. Its
// methods do nothing on a nil explainer, which is how compute runs for the
// snapshot alone.
type explainer struct {
	sub   *Source // the subscription that decided the plan
	basis Source  // the plan applied: own or fallback
	// name is how details name the basis: "plan pro (version 3)".
	name, because string
	set           map[string]*Source // policy → the plan's setting of it
	after         map[string][]Source
}

func newExplainer() *explainer {
	return &explainer{set: map[string]*Source{}, after: map[string][]Source{}}
}

func (e *explainer) subscription(sub *Subscription, graceEnd *time.Time, outcome string) {
	if e == nil {
		return
	}
	d := "subscription " + sub.ID + " is " + sub.Status
	if sub.LastEventID != "" {
		d += " (set by Stripe event " + sub.LastEventID + ")"
	}
	e.sub = &Source{Kind: SourceSubscription, Detail: d + ": " + outcome,
		SubscriptionID: sub.ID, Status: sub.Status, GraceEnd: graceEnd, StripeEventID: sub.LastEventID}
}

func graceNote(graceEnd *time.Time) string {
	if graceEnd == nil {
		return "past_due with no grace end known: the tenant's plan is kept"
	}
	return "past_due, the tenant's plan is kept until the grace period ends at " + fmtTime(*graceEnd)
}

func (e *explainer) ownPlan(p catalogue.Plan) {
	if e == nil {
		return
	}
	e.basis = Source{Kind: SourcePlan, PlanKey: p.Key, PlanVersion: p.Version}
	e.name = "plan " + p.Key + " (version " + strconv.FormatInt(p.Version, 10) + ")"
}

// fallback records the default plan applied instead of the tenant's own.
func (e *explainer) fallback(p catalogue.Plan, own, reason string) {
	if e == nil {
		return
	}
	e.basis = Source{Kind: SourceFallback, PlanKey: p.Key, PlanVersion: p.Version, Reason: reason}
	e.name = "default plan " + p.Key + " (version " + strconv.FormatInt(p.Version, 10) + ")"
	if p.Version == 0 { // see Service.fallback
		e.name = "default plan " + p.Key + " (not stored: metered use is refused)"
	}
	e.because = "; it replaces plan " + own + " because " + reason
}

// plan records what the applied plan sets for a policy.
func (e *explainer) plan(policy, what string, result *int64) {
	if e == nil {
		return
	}
	src := e.basis
	src.Detail = e.name + " sets " + what + e.because
	src.Result = copyInt(result)
	e.set[policy] = &src
}

// kept records a limit of the tenant's own plan that stays after a
// fallback because the default plan leaves the policy unlimited.
func (e *explainer) kept(policy string, own catalogue.Plan, what string, result *int64) {
	if e == nil {
		return
	}
	e.add(policy, Source{Kind: SourcePlan, PlanKey: own.Key, PlanVersion: own.Version, Result: copyInt(result),
		Detail: "plan " + own.Key + " (version " + strconv.FormatInt(own.Version, 10) + ") sets " + what +
			", which stays: the default plan leaves it unlimited, and losing paid access never lifts a limit"})
}

func (e *explainer) add(policy string, src Source) {
	if e == nil {
		return
	}
	e.after[policy] = append(e.after[policy], src)
}

func (e *explainer) seats(meter string, sub *Subscription, own bool, seats, per, result int64) {
	if e == nil {
		return
	}
	src := Source{Kind: SourceSeats, Quantity: &seats, Result: &result,
		Detail: fmt.Sprintf("quantity %s seats × %s = %s", numfmt.Int(seats), numfmt.Int(per), numfmt.Int(result))}
	switch {
	case sub == nil:
		src.Detail += " (no subscription: one seat)"
	case !own:
		src.Detail += " (default plan: one seat)"
	default:
		src.SubscriptionID = sub.ID
	}
	e.add(QuotaPolicy(meter), src)
}

func (e *explainer) addon(meter string, it addonItem, per int64, applied bool, result int64) {
	if e == nil {
		return
	}
	qty := it.qty
	src := Source{Kind: SourceAddon, StripePriceID: it.price, Name: it.name, Quantity: &qty}
	grant := fmt.Sprintf("add-on %s (%s) × %s: +%s", it.name, it.price, numfmt.Int(it.qty), numfmt.Int(saturatingMul(per, it.qty)))
	if applied {
		src.Result = &result
		src.Detail = grant + " = " + numfmt.Int(result)
	} else {
		src.Ignored = true
		src.Detail = grant + " not applied: the plan leaves " + meter + " unlimited"
	}
	e.add(QuotaPolicy(meter), src)
}

// lostAddons records add-ons a fallback does not apply.
func (e *explainer) lostAddons(items []addonItem) {
	if e == nil {
		return
	}
	for _, it := range items {
		for _, m := range slices.Sorted(maps.Keys(it.quotas)) {
			qty := it.qty
			e.add(QuotaPolicy(m), Source{Kind: SourceAddon, StripePriceID: it.price, Name: it.name, Quantity: &qty, Ignored: true,
				Detail: fmt.Sprintf("add-on %s (%s) × %s not applied: add-ons come with paid access only", it.name, it.price, numfmt.Int(it.qty))})
		}
	}
}

func (e *explainer) override(o override, applied bool, q limiter.Quota) {
	if e == nil {
		return
	}
	src := Source{Kind: SourceOverride, OverrideID: o.id, Reason: o.reason, ExpiresAt: o.expiresAt}
	var did []string
	if o.quotaLimit != nil {
		did = append(did, "limit set to "+numfmt.Int(*o.quotaLimit))
	}
	if o.extra != nil {
		did = append(did, "+"+numfmt.Int(*o.extra)+" extra")
	}
	if o.mode != nil {
		did = append(did, "mode "+*o.mode)
	}
	d := "override " + strings.Join(did, ", ")
	if applied {
		l := q.Limit
		src.Result = &l
		d += " = " + numfmt.Int(l) + " " + string(q.Mode)
	} else {
		src.Ignored = true
		d += " not applied: the meter is unlimited and the override sets no limit"
	}
	if o.expiresAt != nil {
		d += ", until " + fmtTime(*o.expiresAt)
	}
	if o.reason != "" {
		d += " (" + o.reason + ")"
	}
	src.Detail = d
	e.add(QuotaPolicy(o.meter), src)
}

// limits assembles the recorded sources around the snapshot's figures:
// rate, concurrency, then every meter the snapshot limits or anything
// mentions (the default meter always), sorted.
func (e *explainer) limits(snap limiter.Snapshot, in inputs) []Limit {
	out := []Limit{e.limit(PolicyRate, "")}
	if snap.Rate != nil {
		r := *snap.Rate
		out[0].Rate, out[0].Unlimited = &r, false
	}
	c := e.limit(PolicyConcurrency, "")
	if snap.Concurrency > 0 {
		n := snap.Concurrency
		c.Limit, c.Unlimited = &n, false
	}
	out = append(out, c)
	out = append(out, e.windowLimits(snap)...)
	meters := map[string]bool{keyspace.DefaultMeter: true}
	for m := range snap.Quotas {
		meters[m] = true
	}
	for m := range in.plan.Quotas {
		meters[m] = true
	}
	for p := range e.after {
		if m, ok := strings.CutPrefix(p, "quota:"); ok {
			meters[m] = true
		}
	}
	for _, m := range slices.Sorted(maps.Keys(meters)) {
		l := e.limit(QuotaPolicy(m), m)
		if q, ok := snap.Quotas[m]; ok {
			n := q.Limit
			l.Limit, l.Mode, l.Unlimited = &n, string(q.Mode), false
		}
		out = append(out, l)
	}
	return out
}

// limit is one policy's sources: the subscription, the plan's setting (or
// that it leaves the policy unlimited), then what changed it.
func (e *explainer) limit(policy, meter string) Limit {
	l := Limit{Policy: policy, Meter: meter, Unlimited: true}
	if e.sub != nil {
		l.Sources = append(l.Sources, *e.sub)
	}
	if set := e.set[policy]; set != nil {
		l.Sources = append(l.Sources, *set)
	} else {
		src := e.basis
		what := policy
		if meter != "" {
			what = meter
		}
		src.Detail = e.name + " leaves " + what + " unlimited" + e.because
		l.Sources = append(l.Sources, src)
	}
	l.Sources = append(l.Sources, e.after[policy]...)
	return l
}

func copyInt(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// fmtTime writes times in the explanation's text as the console writes
// them everywhere else ("31 Dec 2026 00:00 UTC"); the structured fields
// (expires_at) stay RFC 3339.
func fmtTime(t time.Time) string { return t.UTC().Format("2 Jan 2006 15:04 UTC") }
