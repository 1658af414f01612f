package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/internal/metering"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/limiter"
)

// quotaRig is a tenant on a plan with quotas, a limiter deciding for it and
// a metering service whose hooks are the notify service's.
type quotaRig struct {
	b      bundle
	ents   *entitlements.Service
	meter  *metering.Service
	lim    *limiter.Limiter
	tenant entitlements.Tenant
	store  *limitstore.Store
}

func newQuotaRig(t *testing.T, b bundle, quotas map[string]*catalogue.QuotaInput, mopts metering.Options) quotaRig {
	t.Helper()
	ctx := context.Background()
	rdb, prefix := redistest.New(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := limitstore.New(rdb, prefix)
	ents := entitlements.NewService(b.db, store, log, entitlements.Options{})
	cat := catalogue.NewService(b.db, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	plan := fmt.Sprintf("wh%d", time.Now().UnixNano())
	if _, err := cat.CreatePlan(ctx, catalogue.PlanInput{Key: plan, Name: plan, Quotas: quotas}); err != nil {
		t.Fatal(err)
	}
	tenant, err := ents.CreateTenant(ctx, entitlements.TenantInput{Name: "t", Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	mopts.Snapshot, mopts.Limits = ents.SnapshotFromPostgres, ents.CachedSnapshot
	mopts.Crossings, mopts.Exhausted, mopts.PeriodsClosed = b.svc.QuotaCrossings, b.svc.QuotaExhaustions, b.svc.PeriodsClosed
	m := metering.NewService(b.db, store, log, mopts)
	l, err := limiter.New(rdb, limiter.Options{Prefix: prefix, UsageLoader: m.LoadUsage, Timeout: 5 * time.Second, DisableRefusalCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return quotaRig{b: b, ents: ents, meter: m, lim: l, tenant: tenant, store: store}
}

func (r quotaRig) allow(t *testing.T, n int, meter string) (allowed int) {
	t.Helper()
	for range n {
		d, err := r.lim.Allow(context.Background(), r.tenant.ID, limiter.Request{Cost: 1, Meter: meter})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
	}
	return allowed
}

func (r quotaRig) flush(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := r.meter.FlushOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.meter.FlushRefusals(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func eventsOf[T any](t *testing.T, b bundle, typ string) []T {
	t.Helper()
	rows, err := b.db.Query(context.Background(), `SELECT payload FROM webhook_events WHERE type = $1 ORDER BY created_at, id`, typ)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var ev struct{ Data T }
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.Data)
	}
	return out
}

// A hard quota's first refusal in the window is one quota.exhausted event,
// found by the refusals flush from the limiter's refusal counts; later
// refusals, and further passes, add none. A soft quota never refuses and
// sends none.
func TestQuotaExhaustedOncePerWindow(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	hard, soft := int64(5), int64(3)
	r := newQuotaRig(t, b, map[string]*catalogue.QuotaInput{
		"requests": {Limit: &hard, Mode: "hard"}, "exports": {Limit: &soft, Mode: "soft"}}, metering.Options{})
	rc := newReceiver(t)
	if _, err := b.svc.Create(context.Background(), EndpointInput{URL: rc.srv.URL, Events: []string{TypeQuotaExhausted}}); err != nil {
		t.Fatal(err)
	}
	if got := r.allow(t, 5, ""); got != 5 {
		t.Fatalf("%d allowed, want 5", got)
	}
	r.allow(t, 4, "exports") // over the soft quota: admitted
	r.flush(t)
	if got := eventsOf[QuotaExhausted](t, b, TypeQuotaExhausted); len(got) != 0 {
		t.Fatalf("exhausted before any refusal: %+v", got)
	}
	if got := r.allow(t, 3, ""); got != 0 {
		t.Fatalf("%d allowed over the hard quota", got)
	}
	r.flush(t)
	got := eventsOf[QuotaExhausted](t, b, TypeQuotaExhausted)
	if len(got) != 1 {
		t.Fatalf("events %+v, want one", got)
	}
	if e := got[0]; e.TenantID != r.tenant.ID || e.Meter != "requests" || e.Limit != hard || e.WindowStart.IsZero() || !e.WindowEnd.After(e.WindowStart) {
		t.Errorf("event %+v", e)
	}
	r.allow(t, 3, "")
	r.flush(t)
	r.flush(t)
	if got := eventsOf[QuotaExhausted](t, b, TypeQuotaExhausted); len(got) != 1 {
		t.Fatalf("%d events after more refusals in the window, want still 1", len(got))
	}
	waitFor(t, "the delivery", func() bool { return len(rc.requests()) == 1 })
}

// ClosePeriods sends one period.closed per tenant and window with each
// meter's final figure, in the transaction that closes it; a second pass
// closes nothing and sends nothing.
func TestPeriodClosedWithFinalFigures(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	limit := int64(100)
	var now time.Time
	clock := func() time.Time {
		if now.IsZero() {
			return time.Now()
		}
		return now
	}
	r := newQuotaRig(t, b, map[string]*catalogue.QuotaInput{"requests": {Limit: &limit, Mode: "hard"}, "exports": {Limit: &limit, Mode: "soft"}},
		metering.Options{Now: clock})
	r.allow(t, 7, "")
	r.allow(t, 2, "exports")
	r.flush(t)
	snap, err := r.ents.SnapshotFromPostgres(context.Background(), r.tenant.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.meter.ClosePeriods(ctx); err != nil {
		t.Fatal(err)
	}
	if got := closedOf(t, b, r.tenant.ID); len(got) != 0 {
		t.Fatalf("closed an open window: %+v", got)
	}
	now = snap.PeriodEnd.Add(2 * time.Minute) // past the end and its grace
	if n, err := r.meter.ClosePeriods(ctx); err != nil || n < 2 {
		t.Fatalf("closed %d (%v), want at least this tenant's 2 meters", n, err)
	}
	got := closedOf(t, b, r.tenant.ID)
	if len(got) != 1 {
		t.Fatalf("events %+v, want one", got)
	}
	e := got[0]
	if e.TenantID != r.tenant.ID || !e.WindowStart.Equal(snap.PeriodStart) || !e.WindowEnd.Equal(snap.PeriodEnd) ||
		e.Meters["requests"] != 7 || e.Meters["exports"] != 2 || len(e.Meters) != 2 {
		t.Errorf("event %+v, want requests 7 and exports 2 in [%s, %s)", e, snap.PeriodStart, snap.PeriodEnd)
	}
	if _, err := r.meter.ClosePeriods(ctx); err != nil {
		t.Fatal(err)
	}
	if got := closedOf(t, b, r.tenant.ID); len(got) != 1 {
		t.Fatalf("%d events after a second pass, want 1", len(got))
	}
}

// closedOf is the period.closed events of tenant (other tests' tenants
// share the database and close too).
func closedOf(t *testing.T, b bundle, tenant string) []PeriodClosed {
	var out []PeriodClosed
	for _, e := range eventsOf[PeriodClosed](t, b, TypePeriodClosed) {
		if e.TenantID == tenant {
			out = append(out, e)
		}
	}
	return out
}
