package notify

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

// Limits is what entitlements.updated compares and carries.
type Limits struct {
	Plan        string                   `json:"plan"`
	PlanVersion int64                    `json:"plan_version,omitempty"`
	Rate        *limiter.Rate            `json:"rate,omitempty"`
	Concurrency int64                    `json:"concurrency,omitempty"`
	Quotas      map[string]limiter.Quota `json:"quotas,omitempty"`
	Features    []string                 `json:"features,omitempty"`
}

func limitsOf(s limiter.Snapshot) Limits {
	f := slices.Clone(s.Features)
	slices.Sort(f)
	return Limits{Plan: s.Plan, PlanVersion: s.PlanVersion, Rate: s.Rate, Concurrency: s.Concurrency, Quotas: s.Quotas, Features: f}
}

func sameLimits(a, b Limits) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// EntitlementsChanged is entitlements.Options.OnChange: in the change's
// own transaction it emits entitlements.updated when the effective limits
// moved and subscription.status when the status did. A tenant's first
// version (nothing before) emits nothing.
func (s *Service) EntitlementsChanged(ctx context.Context, tx pgx.Tx, c entitlements.Change) error {
	if c.Before.Version == 0 {
		return nil
	}
	var evs []Event
	before, after := limitsOf(c.Before), limitsOf(c.After)
	if !sameLimits(before, after) {
		evs = append(evs, Event{Type: TypeEntitlementsUpdated, Data: map[string]any{
			"tenant_id": c.After.TenantID, "version": c.After.Version, "cause": c.Reason, "before": before, "after": after}})
	}
	if c.Before.Status != c.After.Status {
		evs = append(evs, Event{Type: TypeSubscriptionStatus, Data: map[string]any{
			"tenant_id": c.After.TenantID, "version": c.After.Version, "cause": c.Reason, "before": c.Before.Status, "status": c.After.Status}})
	}
	if len(evs) == 0 {
		return nil
	}
	_, err := s.Emit(ctx, tx, evs...)
	return err
}
