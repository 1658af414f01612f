package metering

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/limiter"
)

// Exhaustion is a hard quota that refused requests in its current window,
// found by the refusals flush from the counts the limiter already keeps (no
// step is added to the decision).
type Exhaustion struct {
	Tenant      string
	Meter       string
	Limit       int64
	WindowStart time.Time
	WindowEnd   time.Time
	// Day is the UTC day whose refusal count grew.
	Day time.Time
}

// DedupeKey names the exhaustion once per tenant, meter and window: every
// later refusal of the window, another flusher or a replay find the same
// key; the next window re-arms it.
func (e Exhaustion) DedupeKey() string {
	return fmt.Sprintf("quota.exhausted/%s/%s/%d", strings.ToLower(e.Tenant), e.Meter, e.WindowStart.Unix())
}

// ExhaustedFunc takes exhaustions inside the refusals flush's transaction.
type ExhaustedFunc func(ctx context.Context, tx pgx.Tx, es []Exhaustion) error

// exhaustions returns the hard quotas among grown (policies whose refusal
// count grew in this pass) refused in the tenant's current window. A
// refusal counted on day belongs to the current window when the window
// contains now (the count grew since the last pass) and day is not before
// the window's first day.
func (s *Service) exhaustions(ctx context.Context, tenant string, day time.Time, grown []string) ([]Exhaustion, error) {
	snap, err := s.opts.Limits(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("metering: exhausted: snapshot of %s: %w", tenant, err)
	}
	now := s.opts.Now()
	if snap.PeriodStart.IsZero() || now.Before(snap.PeriodStart) || !now.Before(snap.PeriodEnd) {
		return nil, nil
	}
	firstDay := snap.PeriodStart.UTC().Truncate(24 * time.Hour)
	if day.Before(firstDay) {
		return nil, nil
	}
	var out []Exhaustion
	for _, meter := range grown {
		q, ok := snap.Quotas[meter]
		if !ok || q.Limit <= 0 || q.Mode == limiter.ModeSoft {
			continue // a rate, a concurrency or window limit, or a soft quota (never refuses)
		}
		out = append(out, Exhaustion{Tenant: tenant, Meter: meter, Limit: q.Limit,
			WindowStart: snap.PeriodStart, WindowEnd: snap.PeriodEnd, Day: day})
	}
	return out, nil
}
