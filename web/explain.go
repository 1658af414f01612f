package web

import (
	"context"
	"strconv"
	"strings"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// Explainer says where each of a tenant's enforced limits comes from
// (entitlements.Service.Explain), for the tenant page's "Why these limits"
// panel.
type Explainer interface {
	Explain(ctx context.Context, tenantID string) (entitlements.Explanation, error)
}

// whyPanel is the explanation as the panel shows it.
type whyPanel struct {
	entitlements.Explanation
	Rows []whyRow
	// Grants are drawn after the quotas' included units, in this order
	// (credits.Drawable); nil without a GrantManager.
	Grants []credits.Grant
}

// whyRow is one limit of the panel: what is in force and its sources.
type whyRow struct {
	Policy  string
	Title   string
	Value   string
	Sources []whySource
}

// whySource is one source, labelled for people, with a link to where the
// console shows it (the plan, the Stripe event, the override row).
type whySource struct {
	entitlements.Source
	Label    string
	Link     string
	LinkText string
}

var whyLabels = map[string]string{
	entitlements.SourceSubscription: "Subscription",
	entitlements.SourcePlan:         "Plan",
	entitlements.SourceFallback:     "Default plan fallback",
	entitlements.SourceSeats:        "Seats",
	entitlements.SourceAddon:        "Add-on",
	entitlements.SourceOverride:     "Override",
}

// explainTenant is the panel's rows, overrides named with who created them
// when the audit trail knows. Without an Explainer the panel is hidden.
func (w *Web) explainTenant(ctx context.Context, id string) (*whyPanel, error) {
	if w.Explainer == nil {
		return nil, nil
	}
	e, err := w.Explainer.Explain(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(e.OverrideIDs()) > 0 {
		by, err := w.Audit.Creators(ctx, e.TenantID, "override.create")
		if err != nil {
			// The figures stand without the names.
			w.log.WarnContext(ctx, "override creators not read", "tenant_id", e.TenantID, "err", err)
		}
		e.AttributeOverrides(by)
	}
	rows := make([]whyRow, 0, len(e.Limits))
	for _, l := range e.Limits {
		r := whyRow{Policy: l.Policy, Title: limitTitle(l), Value: limitValue(l)}
		for _, s := range l.Sources {
			ws := whySource{Source: s, Label: whyLabels[s.Kind]}
			switch {
			case s.Kind == entitlements.SourceSubscription && s.StripeEventID != "":
				ws.Link, ws.LinkText = "/admin/events/"+s.StripeEventID, "event "+s.StripeEventID
			case (s.Kind == entitlements.SourcePlan || s.Kind == entitlements.SourceFallback) && s.PlanVersion > 0:
				ws.Link, ws.LinkText = "/admin/plans/"+s.PlanKey, "plan "+s.PlanKey
			case s.Kind == entitlements.SourceOverride:
				ws.Link, ws.LinkText = "#overrides", "overrides"
			}
			r.Sources = append(r.Sources, ws)
		}
		rows = append(rows, r)
	}
	p := &whyPanel{Explanation: e, Rows: rows}
	if w.Grants != nil {
		gs, err := w.grantsOf(ctx, id)
		if err != nil {
			return nil, err
		}
		p.Grants = credits.Drawable(gs)
	}
	return p, nil
}

func limitTitle(l entitlements.Limit) string {
	switch l.Policy {
	case entitlements.PolicyRate:
		return "Rate"
	case entitlements.PolicyConcurrency:
		return "Concurrency"
	}
	if l.Window != "" {
		return "Window: " + l.Window
	}
	return "Quota: " + l.Meter
}

func limitValue(l entitlements.Limit) string {
	switch {
	case l.Unlimited:
		return "unlimited"
	case l.Rate != nil:
		return strconv.FormatFloat(l.Rate.PerSecond, 'f', -1, 64) + "/s, burst " + numfmt.Int(l.Rate.Burst)
	case l.Policy == entitlements.PolicyConcurrency:
		return numfmt.Int(*l.Limit) + " at once"
	case l.Window != "":
		return numfmt.Int(*l.Limit) + " per " + l.Length + ", " + l.Kind
	}
	return strings.TrimSpace(numfmt.Int(*l.Limit) + " a period, " + l.Mode)
}
