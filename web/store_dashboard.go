package web

// The dashboard's read model: a tenant's usage and refusals per day and
// its API keys (the console's tenant page shows them too).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// DayUsage is the usage of one meter on one UTC day.
type DayUsage struct {
	Day   time.Time
	Meter string
	Used  int64
}

// dailyUsage sums the tenant's hourly history of the period starting at
// periodStart per UTC day. Rows are kept per period (metering writes the
// hour a period starts in as one row per period), so selecting by period
// keeps the new period's first minutes and none of the previous period's
// end in the same clock hour.
func (s *store) dailyUsage(ctx context.Context, tenantID string, periodStart time.Time) ([]DayUsage, error) {
	rows, err := s.db.Query(ctx, `
		SELECT date_trunc('day', hour AT TIME ZONE 'UTC') AS day, meter, sum(used)::bigint
		FROM usage_hourly WHERE tenant_id = $1 AND period_start = $2
		GROUP BY 1, 2 ORDER BY 1, 2`, tenantID, periodStart)
	if err != nil {
		return nil, fmt.Errorf("web: daily usage: %w", err)
	}
	var out []DayUsage
	var d DayUsage
	_, err = pgx.ForEachRow(rows, []any{&d.Day, &d.Meter, &d.Used}, func() error {
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: daily usage: %w", err)
	}
	return out, nil
}

// DayRefusals is the refused requests of one policy on one UTC day.
type DayRefusals struct {
	Day     time.Time
	Policy  string
	Refused int64
}

func (s *store) dailyRefusals(ctx context.Context, tenantID string, from, to time.Time) ([]DayRefusals, error) {
	rows, err := s.db.Query(ctx, `
		SELECT day, policy, refused FROM refusals_daily
		WHERE tenant_id = $1 AND day >= $2::date AND day <= $3::date ORDER BY day, policy`,
		tenantID, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("web: refusals: %w", err)
	}
	var out []DayRefusals
	var d DayRefusals
	_, err = pgx.ForEachRow(rows, []any{&d.Day, &d.Policy, &d.Refused}, func() error {
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: refusals: %w", err)
	}
	return out, nil
}

// KeyRow is an API key as people see it: never the key, only its prefix.
type KeyRow struct {
	ID         string
	Prefix     string
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

func (s *store) keys(ctx context.Context, tenantID string) ([]KeyRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT id, prefix, name, created_at, last_used_at, revoked_at FROM api_keys
		WHERE tenant_id = $1 ORDER BY revoked_at IS NOT NULL, created_at DESC LIMIT 100`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("web: keys: %w", err)
	}
	var out []KeyRow
	var k KeyRow
	_, err = pgx.ForEachRow(rows, []any{&k.ID, &k.Prefix, &k.Name, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt}, func() error {
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: keys: %w", err)
	}
	return out, nil
}

// keyOwnedBy reports whether the key belongs to the tenant: the dashboard
// checks it before revoking, so that another tenant's key id is a 404.
func (s *store) keyOwnedBy(ctx context.Context, keyID, tenantID string) error {
	if !ids.IsUUID(keyID) {
		return apperr.New(apperr.NotFound, "API key not found")
	}
	var one int
	err := s.db.QueryRow(ctx, `SELECT 1 FROM api_keys WHERE id = $1 AND tenant_id = $2`, keyID, tenantID).Scan(&one)
	if err != nil {
		return fmt.Errorf("web: key: %w", notFound(err, "API key"))
	}
	return nil
}
