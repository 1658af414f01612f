package web

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/metering"
)

// MeterErrorRow is one Stripe meter error notification (a thin event such
// as v1.billing.meter.error_report_triggered, stored by the webhook): Stripe
// could not bill meter events it had accepted (unknown customer, bad value).
type MeterErrorRow = billing.MeterError

// MeterReportRow is a usage report to Stripe that needs a look: failed, or
// billed late (after its period's invoice was final).
type MeterReportRow struct {
	metering.ReportToCheck
	TenantName string
}

type meteringPage struct {
	Errors  []MeterErrorRow
	Reports []MeterReportRow
}

func (s *store) meterErrors(ctx context.Context, limit int) ([]MeterErrorRow, error) {
	out, err := s.bill.MeterErrors(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("web: meter errors: %w", err)
	}
	return out, nil
}

func (s *store) meterReportsToCheck(ctx context.Context, limit int) ([]MeterReportRow, error) {
	rs, err := s.meter.ReportsToCheck(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("web: meter reports: %w", err)
	}
	tids := make([]string, 0, len(rs))
	for _, r := range rs {
		tids = append(tids, r.TenantID)
	}
	names, err := s.nameTenants(ctx, tids)
	if err != nil {
		return nil, err
	}
	out := make([]MeterReportRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, MeterReportRow{ReportToCheck: r, TenantName: names[r.TenantID]})
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
