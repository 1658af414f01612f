package notify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/metering"
)

// QuotaThreshold is quota.threshold's data.
type QuotaThreshold struct {
	TenantID    string         `json:"tenant_id"`
	Meter       string         `json:"meter"`
	Threshold   map[string]int `json:"threshold"` // {"percent": 80}
	Used        int64          `json:"used"`
	Limit       int64          `json:"limit"`
	WindowStart time.Time      `json:"window_start"`
	WindowEnd   time.Time      `json:"window_end"`
}

// QuotaCrossings writes one quota.threshold event per crossing in tx, the
// flush's transaction (metering.Options.Crossings); the crossing's key
// keeps it to one event per tenant, meter, window and threshold.
func (s *Service) QuotaCrossings(ctx context.Context, tx pgx.Tx, cs []metering.Crossing) error {
	evs := make([]Event, len(cs))
	for i, c := range cs {
		evs[i] = Event{Type: TypeQuotaThreshold, DedupeKey: c.DedupeKey(), Data: QuotaThreshold{
			TenantID: c.Tenant, Meter: c.Meter, Threshold: map[string]int{"percent": c.Percent},
			Used: c.Used, Limit: c.Limit, WindowStart: c.WindowStart.UTC(), WindowEnd: c.WindowEnd.UTC()}}
	}
	_, err := s.Emit(ctx, tx, evs...)
	return err
}
