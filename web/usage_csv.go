package web

import (
	"encoding/csv"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// handleDashboardUsageCSV exports the tenant's usage per UTC day and meter
// for the current period as CSV. The figures come from the same query as
// the dashboard's per-day charts (dailyUsage over the same period), so the
// file and the chart never disagree.
func (w *Web) handleDashboardUsageCSV() echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		tenantID := sessionFrom(c).TenantID
		u, err := w.Usage.Usage(ctx, tenantID)
		if err != nil {
			return err
		}
		rows, err := w.store.dailyUsage(ctx, tenantID, u.Period.Start)
		if err != nil {
			return err
		}
		h := c.Response().Header()
		h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		h.Set(echo.HeaderContentDisposition, `attachment; filename="usage-`+u.Period.Start.UTC().Format("2006-01-02")+`.csv"`)
		h.Set("Cache-Control", "no-store")
		c.Response().WriteHeader(http.StatusOK)
		cw := csv.NewWriter(c.Response())
		_ = cw.Write([]string{"day", "meter", "quantity"})
		for _, r := range rows {
			_ = cw.Write([]string{r.Day.Format("2006-01-02"), r.Meter, strconv.FormatInt(r.Used, 10)})
		}
		cw.Flush()
		return cw.Error()
	}
}
