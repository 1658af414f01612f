package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkDashboardRender is the server time of GET /dashboard (every
// query, Redis read and template) for a tenant with a month of hourly
// history of two meters and refusals on most days, through the full echo
// stack but without the network.
func BenchmarkDashboardRender(b *testing.B) {
	bd := setup(b)
	tn := bd.tenant(b, "Bench Corp", bd.pro)
	bd.key(b, tn.ID)
	// 29 days back keeps the whole history inside the current period
	// whatever the month's length.
	bd.backdate(b, tn.ID, 29)
	bd.seedUsage(b, tn.ID, 24*30)
	var rows int
	if err := bd.pool.QueryRow(bd.ctx, `SELECT count(*) FROM usage_hourly WHERE tenant_id = $1`, tn.ID).Scan(&rows); err != nil || rows < 28*24*2 {
		b.Fatalf("seeded %d hourly rows (%v)", rows, err)
	}
	raw, _, err := bd.web.store.createSession(bd.ctx, kindTenant, tn.ID, credential{}, bd.web.TenantTTL)
	if err != nil {
		b.Fatal(err)
	}
	h := bd.srv.Config.Handler
	get := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/dashboard", nil)
		req.AddCookie(&http.Cookie{Name: cookieTenant, Value: raw})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := get(); rec.Code != http.StatusOK {
		b.Fatalf("dashboard: %d\n%s", rec.Code, rec.Body.String())
	}
	for b.Loop() {
		if rec := get(); rec.Code != http.StatusOK {
			b.Fatalf("dashboard: %d", rec.Code)
		}
	}
	b.ReportMetric(float64(rows), "hourly_rows")
}
