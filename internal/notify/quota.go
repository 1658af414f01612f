package notify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/metering"
)

// QuotaThreshold is quota.threshold's data.
type QuotaThreshold struct {
	TenantID    string           `json:"tenant_id"`
	Meter       string           `json:"meter"`
	Threshold   map[string]int64 `json:"threshold"` // {"percent": 80} or {"units": 5000}
	Used        int64            `json:"used"`
	Limit       int64            `json:"limit"`
	WindowStart time.Time        `json:"window_start"`
	WindowEnd   time.Time        `json:"window_end"`
}

// QuotaCrossings writes one quota.threshold event per crossing in tx, the
// flush's transaction (metering.Options.Crossings); the crossing's key
// keeps it to one event per tenant, meter, window and threshold.
func (s *Service) QuotaCrossings(ctx context.Context, tx pgx.Tx, cs []metering.Crossing) error {
	evs := make([]Event, len(cs))
	for i, c := range cs {
		th := map[string]int64{"percent": int64(c.Percent)}
		if c.Units > 0 {
			th = map[string]int64{"units": c.Units}
		}
		evs[i] = Event{Type: TypeQuotaThreshold, DedupeKey: c.DedupeKey(), Data: QuotaThreshold{
			TenantID: c.Tenant, Meter: c.Meter, Threshold: th,
			Used: c.Used, Limit: c.Limit, WindowStart: c.WindowStart.UTC(), WindowEnd: c.WindowEnd.UTC()}}
	}
	_, err := s.Emit(ctx, tx, evs...)
	return err
}

// QuotaExhausted is quota.exhausted's data.
type QuotaExhausted struct {
	TenantID    string    `json:"tenant_id"`
	Meter       string    `json:"meter"`
	Limit       int64     `json:"limit"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
}

// QuotaExhaustions writes one quota.exhausted event per exhaustion in tx,
// the refusals flush's transaction (metering.Options.Exhausted); its key
// keeps it to one per tenant, meter and window.
func (s *Service) QuotaExhaustions(ctx context.Context, tx pgx.Tx, es []metering.Exhaustion) error {
	evs := make([]Event, len(es))
	for i, e := range es {
		evs[i] = Event{Type: TypeQuotaExhausted, DedupeKey: e.DedupeKey(), Data: QuotaExhausted{
			TenantID: e.Tenant, Meter: e.Meter, Limit: e.Limit, WindowStart: e.WindowStart.UTC(), WindowEnd: e.WindowEnd.UTC()}}
	}
	_, err := s.Emit(ctx, tx, evs...)
	return err
}

// PeriodClosed is period.closed's data.
type PeriodClosed struct {
	TenantID    string           `json:"tenant_id"`
	WindowStart time.Time        `json:"window_start"`
	WindowEnd   time.Time        `json:"window_end"`
	Meters      map[string]int64 `json:"meters"` // meter → final usage
}

// PeriodsClosed writes one period.closed event per closed window in tx,
// ClosePeriods' transaction (metering.Options.PeriodsClosed).
func (s *Service) PeriodsClosed(ctx context.Context, tx pgx.Tx, ws []metering.ClosedWindow) error {
	evs := make([]Event, len(ws))
	for i, w := range ws {
		evs[i] = Event{Type: TypePeriodClosed, DedupeKey: w.DedupeKey(), Data: PeriodClosed{
			TenantID: w.Tenant, WindowStart: w.WindowStart.UTC(), WindowEnd: w.WindowEnd.UTC(), Meters: w.Meters}}
	}
	_, err := s.Emit(ctx, tx, evs...)
	return err
}
