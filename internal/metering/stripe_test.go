package metering

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/stripemock"
)

// recordingSender passes sends to Stripe (stripe-mock) and records them;
// fail makes it refuse instead, as an unreachable Stripe would.
type recordingSender struct {
	next MeterSender
	mu   sync.Mutex
	fail bool
	sent []MeterEvent
}

func (r *recordingSender) SendMeterEvent(ctx context.Context, ev MeterEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return errors.New("stripe unreachable")
	}
	if err := r.next.SendMeterEvent(ctx, ev); err != nil {
		return err
	}
	r.sent = append(r.sent, ev)
	return nil
}

type reportRow struct {
	id, status string
	qty        int64
	attempts   int
}

func (b *bundle) reports(t *testing.T, tenant string) []reportRow {
	t.Helper()
	rows, err := b.db.Query(b.ctx, `SELECT identifier, status, quantity, attempts FROM stripe_meter_reports WHERE tenant_id = $1 ORDER BY created_at, identifier`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []reportRow
	for rows.Next() {
		var r reportRow
		if err := rows.Scan(&r.id, &r.status, &r.qty, &r.attempts); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestReportToStripeNeverDoubleBills(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	base := stripemock.Start(t)
	b := setup(t)
	plan := "p" + randHex(6)
	if _, err := b.db.Exec(b.ctx, `INSERT INTO plans (key, name) VALUES ($1, $1)`, plan); err != nil {
		t.Fatal(err)
	}
	// Total usage is reported (overage is TestReportOverage's).
	if _, err := b.db.Exec(b.ctx, `INSERT INTO plan_quotas (plan_key, meter, quota_limit, mode, stripe_meter_event, stripe_report) VALUES
($1, 'exports', 5, 'soft', 'tollgate_exports', 'total'), ($1, 'requests', 100, 'hard', NULL, 'total')`, plan); err != nil {
		t.Fatal(err)
	}
	var tenant string
	if err := b.db.QueryRow(b.ctx, `INSERT INTO tenants (name, plan_key, stripe_customer_id, period_anchor) VALUES ('s', $1, $2, now() - interval '1 day') RETURNING id`,
		plan, "cus_"+randHex(6)).Scan(&tenant); err != nil {
		t.Fatal(err)
	}
	// A tenant without a Stripe customer is never reported.
	other := b.newTenant(t, time.Now().Add(-24*time.Hour))
	b.db.Exec(b.ctx, `UPDATE tenants SET plan_key = $2 WHERE id = $1`, other, plan)

	now := time.Now()
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("x1", "exports", 7, now), ev("r1", "requests", 9, now)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Ingest(b.ctx, other, []Event{ev("x1", "exports", 7, now)}); err != nil {
		t.Fatal(err)
	}
	sender := &recordingSender{next: NewStripeMeterSender("sk_test_123", base)}
	st, err := b.svc.ReportToStripe(b.ctx, sender)
	if err != nil {
		t.Fatal(err)
	}
	rs := b.reports(t, tenant)
	if len(rs) != 1 || rs[0].status != "sent" || rs[0].qty != 7 || st.Sent < 1 {
		t.Fatalf("reports = %+v (stats %+v), want one sent report of 7 exports", rs, st)
	}
	if got := b.reports(t, other); len(got) != 0 {
		t.Fatalf("tenant without a Stripe customer reported: %+v", got)
	}
	first := rs[0].id

	// Nothing new: nothing sent.
	sender.sent = nil
	if _, err := b.svc.ReportToStripe(b.ctx, sender); err != nil {
		t.Fatal(err)
	}
	for _, ev := range sender.sent {
		if ev.Identifier == first {
			t.Fatalf("report %s sent twice", first)
		}
	}

	// More usage while Stripe is down: recorded, failed, then sent under
	// the same identifier once Stripe is back; never a second report.
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("x2", "exports", 3, now)}); err != nil {
		t.Fatal(err)
	}
	sender.fail = true
	if _, err := b.svc.ReportToStripe(b.ctx, sender); err != nil {
		t.Fatal(err)
	}
	rs = b.reports(t, tenant)
	if len(rs) != 2 || rs[1].status != "failed" || rs[1].qty != 3 || rs[1].attempts != 1 {
		t.Fatalf("reports while Stripe is down = %+v", rs)
	}
	sender.fail = false
	sender.sent = nil
	if _, err := b.svc.ReportToStripe(b.ctx, sender); err != nil {
		t.Fatal(err)
	}
	rs = b.reports(t, tenant)
	if len(rs) != 2 || rs[1].status != "sent" || rs[1].attempts != 2 {
		t.Fatalf("reports after Stripe is back = %+v", rs)
	}
	var resent bool
	for _, ev := range sender.sent {
		resent = resent || ev.Identifier == rs[1].id
		if ev.Identifier == rs[1].id && (ev.Value != 3 || ev.EventName != "tollgate_exports") {
			t.Fatalf("resent %+v", ev)
		}
	}
	if !resent {
		t.Fatalf("failed report %s was not sent again", rs[1].id)
	}

	// A crash after recording and before sending leaves a pending report:
	// the next pass sends it, and does not report its units again.
	if _, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("x3", "exports", 4, now)}); err != nil {
		t.Fatal(err)
	}
	sender.fail = true
	b.svc.ReportToStripe(b.ctx, sender)
	b.db.Exec(b.ctx, `UPDATE stripe_meter_reports SET status = 'pending' WHERE tenant_id = $1 AND status = 'failed'`, tenant)
	sender.fail = false
	if _, err := b.svc.ReportToStripe(b.ctx, sender); err != nil {
		t.Fatal(err)
	}
	rs = b.reports(t, tenant)
	var total int64
	for _, r := range rs {
		if r.status != "sent" {
			t.Fatalf("report %+v not sent", r)
		}
		total += r.qty
	}
	if len(rs) != 3 || total != 14 {
		t.Fatalf("reports = %+v, want 3 summing to 14", rs)
	}
}

func TestReportIDFitsStripe(t *testing.T) {
	// Not parallel: the Stripe report is one pass over every tenant's usage.
	tenant := "0b5e1f8e-4c1a-4d2b-9c3e-123456789abc"
	start := time.Unix(1764460800, 0)
	if got := reportID(tenant, "exports", start, 3); got != tenant+":exports:1764460800:3" {
		t.Fatalf("reportID = %q", got)
	}
	long := reportID(tenant, strings.Repeat("m", 64), start, 12345)
	if len(long) > maxIdentifier || long != reportID(tenant, strings.Repeat("m", 64), start, 12345) {
		t.Fatalf("long meter: %q (%d chars)", long, len(long))
	}
	if long == reportID(tenant, strings.Repeat("n", 64), start, 12345) {
		t.Fatal("two long meters share an identifier")
	}
}
