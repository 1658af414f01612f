package web

// The dashboard's read model: a tenant's usage and refusals per day and
// its API keys (the console's tenant page shows them too).

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// DayUsage is the usage of one meter on one UTC day.
type DayUsage = metering.DayUsage

// dailyUsage sums the tenant's hourly history of the period starting at
// periodStart per UTC day (metering.Service.DailyUsage).
func (s *store) dailyUsage(ctx context.Context, tenantID string, periodStart time.Time) ([]DayUsage, error) {
	out, err := s.meter.DailyUsage(ctx, tenantID, periodStart)
	if err != nil {
		return nil, fmt.Errorf("web: daily usage: %w", err)
	}
	return out, nil
}

// DayRefusals is the refused requests of one policy on one UTC day.
type DayRefusals = metering.DayRefusals

func (s *store) dailyRefusals(ctx context.Context, tenantID string, from, to time.Time) ([]DayRefusals, error) {
	out, err := s.meter.DailyRefusals(ctx, tenantID, from, to)
	if err != nil {
		return nil, fmt.Errorf("web: refusals: %w", err)
	}
	return out, nil
}

// KeyRow is an API key as people see it: never the key, only its prefix.
type KeyRow = credentials.KeySummary

// keys are the tenant's last 100 keys, unrevoked ones first, each group
// newest first.
func (s *store) keys(ctx context.Context, tenantID string) ([]KeyRow, error) {
	ks, err := s.creds.ListKeys(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: keys: %w", err)
	}
	out := make([]KeyRow, 0, len(ks))
	for _, k := range ks {
		out = append(out, KeyRow(k))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].RevokedAt == nil && out[j].RevokedAt != nil })
	return out[:min(len(out), 100)], nil
}

// keyOwnedBy reports whether the key belongs to the tenant: the dashboard
// checks it before revoking, so that another tenant's key id is a 404.
func (s *store) keyOwnedBy(ctx context.Context, keyID, tenantID string) error {
	if _, err := s.creds.TenantKey(ctx, tenantID, keyID); err != nil {
		return fmt.Errorf("web: key: %w", err)
	}
	return nil
}
