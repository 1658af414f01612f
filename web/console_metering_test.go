package web

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The console lists Stripe's meter error notifications (thin events the
// webhook stored) and the usage reports that failed or were billed late;
// a sent, on-time report is not listed, and what Stripe sent is escaped.
func TestConsoleMeteringShowsMeterErrorsAndLateReports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tn := b.tenant(t, "Initech", b.free)
	evID := "evt_test_" + tn.ID[:8] + "meter"
	thin := `{"id":"` + evID + `","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","livemode":false,` +
		`"created":"2026-11-30T10:00:00.000Z","related_object":{"id":"mtr_test_61Q","type":"billing.meter","url":"/v1/billing/meters/mtr_test_61Q"},` +
		`"data":{"developer_message_summary":"There is 1 invalid event <b>customer</b>"}}`
	if _, err := b.pool.Exec(b.ctx, `
		INSERT INTO stripe_events (id, type, event_created, payload, status) VALUES ($1, 'v1.billing.meter.error_report_triggered', now(), $2, 'processed')`,
		evID, thin); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-40 * 24 * time.Hour).Truncate(time.Second)
	for _, r := range []struct {
		id, status string
		late       bool
		lastError  any
	}{
		{tn.ID + ":tokens:1:1", "failed", false, "stripe unreachable"},
		{tn.ID + ":tokens:1:2", "sent", true, nil},
		{tn.ID + ":tokens:1:3", "sent", false, nil},
	} {
		if _, err := b.pool.Exec(b.ctx, `
			INSERT INTO stripe_meter_reports (identifier, tenant_id, meter, event_name, period_start, quantity, status, late, last_error, event_time)
			VALUES ($1, $2, 'tokens', 'tg_tokens', $3, 7, $4, $5, $6, now())`, r.id, tn.ID, start, r.status, r.late, r.lastError); err != nil {
			t.Fatal(err)
		}
	}
	br, _ := b.adminBrowser(t)
	page := br.get("/admin/metering")
	wantStatus(t, page, http.StatusOK, "metering page")
	for _, want := range []string{evID, "mtr_test_61Q", "1 invalid event &lt;b&gt;customer&lt;/b&gt;", tn.ID + ":tokens:1:1", "stripe unreachable",
		tn.ID + ":tokens:1:2", ">late<", "Initech", `href="/admin/metering"`} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("metering page lacks %q", want)
		}
	}
	if strings.Contains(page.body, tn.ID+":tokens:1:3") || strings.Contains(page.body, "<b>customer") {
		t.Fatal("the page lists an on-time sent report, or shows Stripe's text unescaped")
	}
}
