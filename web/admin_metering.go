package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
)

// MeterErrorRow is one Stripe meter error notification (a thin event such
// as v1.billing.meter.error_report_triggered, stored by the webhook): Stripe
// could not bill meter events it had accepted (unknown customer, bad value).
type MeterErrorRow struct {
	EventID    string
	Type       string
	Meter      string // related_object.id, mtr_…
	Summary    string // data.developer_message_summary when the stored event has it
	ReceivedAt time.Time
}

// MeterReportRow is a usage report to Stripe that needs a look: failed, or
// billed late (after its period's invoice was final).
type MeterReportRow struct {
	Identifier string
	TenantID   string
	TenantName string
	Meter      string
	Quantity   int64
	Status     string
	Late       bool
	Attempts   int
	LastError  string
	EventTime  *time.Time
	CreatedAt  time.Time
}

type meteringPage struct {
	Errors  []MeterErrorRow
	Reports []MeterReportRow
}

func (s *store) meterErrors(ctx context.Context, limit int) ([]MeterErrorRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT id, type, COALESCE(payload->'related_object'->>'id', ''),
		       COALESCE(payload->'data'->>'developer_message_summary', ''), received_at
		FROM stripe_events WHERE type LIKE 'v1.billing.meter.%'
		ORDER BY received_at DESC, id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("web: meter errors: %w", err)
	}
	var out []MeterErrorRow
	var r MeterErrorRow
	if _, err := pgx.ForEachRow(rows, []any{&r.EventID, &r.Type, &r.Meter, &r.Summary, &r.ReceivedAt}, func() error {
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("web: meter errors: %w", err)
	}
	return out, nil
}

func (s *store) meterReportsToCheck(ctx context.Context, limit int) ([]MeterReportRow, error) {
	rows, err := s.db.Query(ctx, `
		SELECT r.identifier, r.tenant_id::text, COALESCE(t.name, ''), r.meter, r.quantity, r.status, r.late, r.attempts,
		       COALESCE(r.last_error, ''), r.event_time, r.created_at
		FROM stripe_meter_reports r LEFT JOIN tenants t ON t.id = r.tenant_id
		WHERE r.status = 'failed' OR r.late
		ORDER BY r.created_at DESC, r.identifier LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("web: meter reports: %w", err)
	}
	var out []MeterReportRow
	var r MeterReportRow
	if _, err := pgx.ForEachRow(rows, []any{&r.Identifier, &r.TenantID, &r.TenantName, &r.Meter, &r.Quantity, &r.Status, &r.Late,
		&r.Attempts, &r.LastError, &r.EventTime, &r.CreatedAt}, func() error {
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("web: meter reports: %w", err)
	}
	return out, nil
}

// handleAdminMetering shows what Stripe said went wrong with metered
// billing, and the usage reports that failed or were billed late.
func (w *Web) handleAdminMetering() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		errs, err := w.store.meterErrors(ctx, 100)
		if err != nil {
			return err
		}
		reports, err := w.store.meterReportsToCheck(ctx, 100)
		if err != nil {
			return err
		}
		return w.render(c, http.StatusOK, "admin_metering", page{Title: "Metered billing", Nav: "metering",
			Data: meteringPage{Errors: errs, Reports: reports}})
	}
}
