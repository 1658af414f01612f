package metering

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/ids"
)

// HourlyPoint is one hour of one meter's usage, for the dashboard's chart.
type HourlyPoint struct {
	Meter string    `json:"meter"`
	Hour  time.Time `json:"hour"`
	Used  int64     `json:"used"`
}

// Hourly returns the tenant's usage per meter and hour in [from, to),
// oldest first, whatever period it counted in (the hour a period starts in
// sums both periods' rows). Hours without usage are absent. Limiter-counted
// usage is booked in the hour it was flushed (at most a flush interval
// late), usage events in the hour of their timestamp.
func (s *Service) Hourly(ctx context.Context, tenantID string, from, to time.Time) ([]HourlyPoint, error) {
	if !ids.IsUUID(tenantID) {
		return []HourlyPoint{}, nil
	}
	rows, err := s.db.Query(ctx, `
SELECT meter, hour, sum(used)::bigint FROM usage_hourly
 WHERE tenant_id = $1 AND hour >= date_trunc('hour', $2::timestamptz) AND hour < $3
 GROUP BY hour, meter ORDER BY hour, meter`, tenantID, from, to)
	if err != nil {
		return nil, fmt.Errorf("metering: hourly: %w", err)
	}
	var p HourlyPoint
	out := []HourlyPoint{}
	if _, err := pgx.ForEachRow(rows, []any{&p.Meter, &p.Hour, &p.Used}, func() error {
		p.Hour = p.Hour.UTC()
		out = append(out, p)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("metering: hourly: %w", err)
	}
	return out, nil
}
