package entitlements_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/limiter"
)

// agree fails unless every figure of the explanation is the one the
// enforced snapshot (computed separately) holds, and each limit's sources
// end on that figure.
func agree(t *testing.T, b *bundle, e entitlements.Explanation) {
	t.Helper()
	snap, err := b.svc.SnapshotFromPostgres(b.ctx, e.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Plan != snap.Plan || e.Status != snap.Status || e.Version != snap.Version {
		t.Fatalf("explained %s/%s v%d, enforced %s/%s v%d", e.Plan, e.Status, e.Version, snap.Plan, snap.Status, snap.Version)
	}
	limited := 0
	for _, l := range e.Limits {
		if len(l.Sources) == 0 {
			t.Fatalf("%s has no source", l.Policy)
		}
		switch {
		case l.Policy == entitlements.PolicyRate:
			if (snap.Rate == nil) != l.Unlimited || (snap.Rate != nil && (l.Rate == nil || *l.Rate != *snap.Rate)) {
				t.Fatalf("rate explained %+v (unlimited %v), enforced %+v", l.Rate, l.Unlimited, snap.Rate)
			}
			continue
		case l.Policy == entitlements.PolicyConcurrency:
			if (snap.Concurrency == 0) != l.Unlimited || (!l.Unlimited && *l.Limit != snap.Concurrency) {
				t.Fatalf("concurrency explained %v (unlimited %v), enforced %d", l.Limit, l.Unlimited, snap.Concurrency)
			}
		case strings.HasPrefix(l.Policy, "window:"):
			i := slices.IndexFunc(snap.Windows, func(w limiter.Window) bool { return entitlements.WindowPolicy(w.Name) == l.Policy })
			if i < 0 || l.Unlimited || *l.Limit != snap.Windows[i].Limit || string(snap.Windows[i].Kind) != l.Kind {
				t.Fatalf("%s explained %s, enforced %+v", l.Policy, dump(l), snap.Windows)
			}
		default:
			q, ok := snap.Quotas[l.Meter]
			if l.Policy != entitlements.QuotaPolicy(l.Meter) || ok == l.Unlimited {
				t.Fatalf("%s explained unlimited=%v, enforced %+v (%v)", l.Policy, l.Unlimited, q, ok)
			}
			if ok {
				limited++
				if *l.Limit != q.Limit || l.Mode != string(q.Mode) {
					t.Fatalf("%s explained %d %s, enforced %d %s", l.Policy, *l.Limit, l.Mode, q.Limit, q.Mode)
				}
			}
		}
		if l.Unlimited {
			continue
		}
		var last *int64
		for _, s := range l.Sources {
			if s.Result != nil && !s.Ignored {
				last = s.Result
			}
		}
		if last == nil || *last != *l.Limit {
			t.Fatalf("%s: sources end on %v, the limit is %d: %s", l.Policy, last, *l.Limit, dump(l))
		}
	}
	if limited != len(snap.Quotas) {
		t.Fatalf("explained %d limited quotas, enforced %d: %+v", limited, len(snap.Quotas), snap.Quotas)
	}
}

func dump(v any) string { b, _ := json.MarshalIndent(v, "", " "); return string(b) }

func limitOf(t *testing.T, e entitlements.Explanation, policy string) entitlements.Limit {
	t.Helper()
	for _, l := range e.Limits {
		if l.Policy == policy {
			return l
		}
	}
	t.Fatalf("no %s in %s", policy, dump(e.Limits))
	return entitlements.Limit{}
}

// kinds lists the sources' kinds, "!" marking ignored ones.
func kinds(l entitlements.Limit) []string {
	var out []string
	for _, s := range l.Sources {
		k := s.Kind
		if s.Ignored {
			k = "!" + k
		}
		out = append(out, k)
	}
	return out
}

func (b *bundle) mustExplain(t *testing.T, id string) entitlements.Explanation {
	t.Helper()
	e, err := b.svc.Explain(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	agree(t, b, e)
	return e
}

func (b *bundle) subscribe(t *testing.T, tenantID, status string, seats int64, pastDueSince, graceEndsAt *time.Time, items map[string]int64) string {
	t.Helper()
	id := uniq("sub")
	_, err := b.pool.Exec(b.ctx, `
INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, plan_quantity, past_due_since, grace_ends_at, last_event_id)
VALUES ($1, $2, 'cus_x', $3, $4, $5, $6, 'evt_' || $1)`, id, tenantID, status, seats, pastDueSince, graceEndsAt)
	if err != nil {
		t.Fatal(err)
	}
	for price, qty := range items {
		if _, err := b.pool.Exec(b.ctx, `INSERT INTO subscription_items (subscription_id, item_id, price_id, quantity) VALUES ($1, $2, $3, $4)`,
			id, uniq("si"), price, qty); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func TestExplainPlainPlanAndItsVersion(t *testing.T) {
	b := setup(t)
	pro := uniq("pro")
	b.mustPlan(t, catalogue.PlanInput{Key: pro,
		Rate: &catalogue.RateInput{PerSecond: ptr(20.0), Burst: ptr[int64](200)}, Concurrency: ptr[int64](10),
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](100000)}, "exports": {Limit: ptr[int64](50), Mode: "soft"}}})
	tn := b.mustTenant(t, pro)

	e := b.mustExplain(t, tn.ID)
	if e.TenantPlan != pro || e.Plan != pro || e.Status != "active" {
		t.Fatalf("explanation head = %+v", e)
	}
	var policies []string
	for _, l := range e.Limits {
		policies = append(policies, l.Policy)
	}
	if want := []string{"rate", "concurrency", "quota:exports", "quota:requests"}; !slices.Equal(policies, want) {
		t.Fatalf("policies %v, want %v", policies, want)
	}
	req := limitOf(t, e, "quota:requests")
	if src := req.Sources[0]; len(req.Sources) != 1 || src.Kind != "plan" || src.PlanKey != pro || src.PlanVersion != 1 ||
		!strings.Contains(src.Detail, "100,000") {
		t.Fatalf("requests sources = %s", dump(req.Sources))
	}
	if r := limitOf(t, e, "rate"); r.Sources[0].PlanVersion != 1 || !strings.Contains(r.Sources[0].Detail, "20 per second, burst 200") {
		t.Fatalf("rate sources = %s", dump(r.Sources))
	}

	// Every edit is a new plan version, and the explanation names it.
	if _, err := b.cat.PatchPlan(b.ctx, pro, func(in *catalogue.PlanInput) error {
		in.Quotas["requests"].Limit = ptr[int64](120000)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e = b.mustExplain(t, tn.ID)
	if src := limitOf(t, e, "quota:requests").Sources[0]; src.PlanVersion != 2 || *src.Result != 120000 {
		t.Fatalf("after the edit: %s", dump(src))
	}
	if p, err := b.cat.GetPlan(b.ctx, pro); err != nil || p.Version != 2 {
		t.Fatalf("plan version after one edit = %d, %v", p.Version, err)
	}
}

func TestExplainOverrides(t *testing.T) {
	b := setup(t) // default plan: requests 100 hard
	tn := b.mustTenant(t, b.free)
	until := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	o, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](50), Mode: "soft",
		Reason: "launch week", ExpiresAt: &until})
	if err != nil {
		t.Fatal(err)
	}
	// An expired override, a limit on a meter the plan leaves unlimited, and
	// extra on one it leaves unlimited (which keeps it unlimited).
	var expired string
	if err := b.pool.QueryRow(b.ctx, `
INSERT INTO quota_overrides (tenant_id, meter, extra, reason, expires_at, created_at)
VALUES ($1, 'requests', 1000000, 'old deal', now() - interval '1 second', now() - interval '1 hour') RETURNING id`, tn.ID).Scan(&expired); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "exports", Limit: ptr[int64](7), Reason: "trial of exports"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "uploads", Extra: ptr[int64](5)}); err != nil {
		t.Fatal(err)
	}

	e := b.mustExplain(t, tn.ID)
	req := limitOf(t, e, "quota:requests")
	if !slices.Equal(kinds(req), []string{"plan", "override"}) || *req.Limit != 150 || req.Mode != "soft" {
		t.Fatalf("requests = %s", dump(req))
	}
	src := req.Sources[1]
	if src.OverrideID != o.ID || src.Reason != "launch week" || src.ExpiresAt == nil || !src.ExpiresAt.Equal(until) || *src.Result != 150 {
		t.Fatalf("override source = %s", dump(src))
	}
	if slices.Contains(e.OverrideIDs(), expired) {
		t.Fatalf("the expired override %s still shows: %v", expired, e.OverrideIDs())
	}
	if ex := limitOf(t, e, "quota:exports"); !slices.Equal(kinds(ex), []string{"plan", "override"}) || *ex.Limit != 7 ||
		!strings.Contains(ex.Sources[0].Detail, "leaves exports unlimited") {
		t.Fatalf("exports = %s", dump(ex))
	}
	if up := limitOf(t, e, "quota:uploads"); !up.Unlimited || !slices.Equal(kinds(up), []string{"plan", "!override"}) {
		t.Fatalf("uploads = %s", dump(up))
	}

	e.AttributeOverrides(map[string]string{o.ID: "alice"})
	if limitOf(t, e, "quota:requests").Sources[1].CreatedBy != "alice" {
		t.Fatal("AttributeOverrides did not name the creator")
	}
}

func TestExplainSubscriptionStatuses(t *testing.T) {
	b := setup(t)
	paid := uniq("paid")
	b.mustPlan(t, catalogue.PlanInput{Key: paid, Rate: &catalogue.RateInput{PerSecond: ptr(10.0), Burst: ptr[int64](20)},
		Concurrency: ptr[int64](3), Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}, "exports": {Limit: ptr[int64](9)}}})
	now := time.Now().UTC().Truncate(time.Microsecond)
	cases := []struct {
		name, status string
		since, grace *time.Time
		wantPlan     string
		wantGrace    *time.Time
		wantFallback bool
		reasonHas    string
	}{
		{name: "active", status: "active", wantPlan: paid},
		{name: "past_due_in_grace", status: "past_due", since: ptr(now.Add(-time.Minute)), wantPlan: paid,
			wantGrace: ptr(now.Add(-time.Minute).Add(time.Hour))},
		{name: "past_due_grace_column", status: "past_due", since: ptr(now.Add(-48 * time.Hour)), grace: ptr(now.Add(time.Hour)), wantPlan: paid,
			wantGrace: ptr(now.Add(time.Hour))},
		{name: "past_due_after_grace", status: "past_due", since: ptr(now.Add(-2 * time.Hour)), wantPlan: b.free,
			wantGrace: ptr(now.Add(-2 * time.Hour).Add(time.Hour)), wantFallback: true, reasonHas: "grace period ended"},
		{name: "canceled", status: "canceled", wantPlan: b.free, wantFallback: true, reasonHas: "is canceled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := b.mustTenant(t, paid)
			sub := b.subscribe(t, tn.ID, tc.status, 1, tc.since, tc.grace, nil)
			e := b.mustExplain(t, tn.ID)
			if e.Plan != tc.wantPlan || e.TenantPlan != paid || e.Status != tc.status {
				t.Fatalf("plan %s (tenant's %s) status %s", e.Plan, e.TenantPlan, e.Status)
			}
			for _, l := range e.Limits {
				s := l.Sources[0]
				if s.Kind != "subscription" || s.SubscriptionID != sub || s.Status != tc.status || s.StripeEventID != "evt_"+sub {
					t.Fatalf("%s: first source = %s", l.Policy, dump(s))
				}
				if (s.GraceEnd == nil) != (tc.wantGrace == nil) || (s.GraceEnd != nil && !s.GraceEnd.Equal(*tc.wantGrace)) {
					t.Fatalf("%s: grace end %v, want %v", l.Policy, s.GraceEnd, tc.wantGrace)
				}
				basis := l.Sources[1]
				if tc.wantFallback != (basis.Kind == "default_plan_fallback") || basis.PlanKey != tc.wantPlan || basis.PlanVersion != 1 {
					t.Fatalf("%s: plan source = %s", l.Policy, dump(basis))
				}
				if tc.wantFallback && (!strings.Contains(basis.Reason, tc.reasonHas) || !strings.Contains(basis.Detail, "replaces plan "+paid)) {
					t.Fatalf("%s: fallback reason = %q / %q", l.Policy, basis.Reason, basis.Detail)
				}
			}
			// The default plan leaves exports, the rate and concurrency
			// unlimited: after a fallback the paid plan's limits stay, and
			// the explanation says so after the fallback source.
			ex := limitOf(t, e, "quota:exports")
			if ex.Unlimited || *ex.Limit != 9 {
				t.Fatalf("exports = %s", dump(ex))
			}
			if !tc.wantFallback {
				return
			}
			for _, policy := range []string{"rate", "concurrency", "quota:exports"} {
				l := limitOf(t, e, policy)
				if !slices.Equal(kinds(l), []string{"subscription", "default_plan_fallback", "plan"}) || l.Unlimited {
					t.Fatalf("%s after a fallback = %s", policy, dump(l))
				}
				if kept := l.Sources[2]; kept.PlanKey != paid || kept.PlanVersion != 1 || !strings.Contains(l.Sources[1].Detail, "leaves") ||
					!strings.Contains(kept.Detail, "which stays: the default plan leaves it unlimited") {
					t.Fatalf("%s: kept source = %s", policy, dump(l.Sources))
				}
			}
			if req := limitOf(t, e, "quota:requests"); *req.Limit != 100 || len(req.Sources) != 2 {
				t.Fatalf("requests (the default plan names it) = %s", dump(req))
			}
		})
	}
}

func TestExplainSeatsAndAddons(t *testing.T) {
	b := setup(t)
	team := uniq("team")
	b.mustPlan(t, catalogue.PlanInput{Key: team, Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: ptr[int64](1000), PerSeat: true}, "exports": {Limit: ptr[int64](20)}}})
	price, unlimitedPrice := uniq("price_exports"), uniq("price_uploads")
	if _, _, err := b.cat.PutAddon(b.ctx, price, catalogue.AddonInput{Name: "Export pack", Quotas: map[string]int64{"exports": 5000, "requests": 100}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.cat.PutAddon(b.ctx, unlimitedPrice, catalogue.AddonInput{Name: "Uploads", Quotas: map[string]int64{"uploads": 10}}); err != nil {
		t.Fatal(err)
	}

	t.Run("active", func(t *testing.T) {
		tn := b.mustTenant(t, team)
		b.subscribe(t, tn.ID, "active", 5, nil, nil, map[string]int64{price: 2, unlimitedPrice: 1})
		e := b.mustExplain(t, tn.ID)
		req := limitOf(t, e, "quota:requests")
		if !slices.Equal(kinds(req), []string{"subscription", "plan", "seats", "addon"}) || *req.Limit != 5200 {
			t.Fatalf("requests = %s", dump(req))
		}
		if s := req.Sources[2]; *s.Quantity != 5 || *s.Result != 5000 || s.Detail != "quantity 5 seats × 1,000 = 5,000" {
			t.Fatalf("seats source = %s", dump(s))
		}
		ex := limitOf(t, e, "quota:exports")
		if s := ex.Sources[2]; s.Kind != "addon" || s.StripePriceID != price || s.Name != "Export pack" || *s.Quantity != 2 || *s.Result != 10020 ||
			!strings.Contains(s.Detail, "+10,000") {
			t.Fatalf("add-on source = %s", dump(ex))
		}
		if up := limitOf(t, e, "quota:uploads"); !up.Unlimited || !slices.Equal(kinds(up), []string{"subscription", "plan", "!addon"}) {
			t.Fatalf("uploads = %s", dump(up))
		}
	})
	t.Run("canceled", func(t *testing.T) {
		tn := b.mustTenant(t, team)
		b.subscribe(t, tn.ID, "canceled", 5, nil, nil, map[string]int64{price: 2})
		e := b.mustExplain(t, tn.ID)
		req := limitOf(t, e, "quota:requests")
		if !slices.Equal(kinds(req), []string{"subscription", "default_plan_fallback", "!addon"}) || *req.Limit != 100 {
			t.Fatalf("requests after cancel = %s", dump(req))
		}
	})
}

func TestExplainBadTenant(t *testing.T) {
	b := setup(t)
	// A malformed id is no tenant, as on every admin route of a tenant.
	if _, err := b.svc.Explain(b.ctx, "not-a-uuid"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("malformed id: %v", err)
	}
	if _, err := b.svc.Explain(b.ctx, "00000000-0000-0000-0000-000000000000"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown tenant: %v", err)
	}
}

// With DEFAULT_PLAN naming no stored plan, a tenant that stopped paying is
// refused metered use on every meter of its plan, not only the default
// meter (its other meters would otherwise turn unlimited).
func TestFallbackToAMissingDefaultPlanRefusesEveryMeter(t *testing.T) {
	b := setup(t)
	paid := uniq("paid")
	b.mustPlan(t, catalogue.PlanInput{Key: paid, Quotas: map[string]*catalogue.QuotaInput{
		"requests": {Limit: ptr[int64](1000)}, "exports": {Limit: ptr[int64](9), Mode: "soft"}}})
	tn := b.mustTenant(t, paid)
	b.subscribe(t, tn.ID, "canceled", 1, nil, nil, nil)
	gone := uniq("gone")
	svc := entitlements.NewService(b.pool, b.store, nil, entitlements.Options{DefaultPlan: gone})
	snap, err := svc.SnapshotFromPostgres(b.ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"requests", "exports"} {
		if q, ok := snap.Quotas[m]; !ok || q.Limit != 0 || q.Mode != "hard" {
			t.Fatalf("%s after a fallback to a missing default plan: %+v (%v)", m, q, ok)
		}
	}
	e, err := svc.Explain(b.ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	ex := limitOf(t, e, "quota:exports")
	if ex.Unlimited || *ex.Limit != 0 || !strings.Contains(ex.Sources[1].Detail, "default plan "+gone+" (not stored: metered use is refused) sets 0") {
		t.Fatalf("exports explained %s", dump(ex))
	}
}
