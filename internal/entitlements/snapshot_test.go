package entitlements_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/limitstore"
	"github.com/tollgatehq/tollgate/limiter"
)

func TestSnapshotFollowsSubscriptionStatus(t *testing.T) {
	b := setup(t)
	paid := uniq("paid")
	b.mustPlan(t, catalogue.PlanInput{Key: paid, Features: []string{"exports"},
		Rate: &catalogue.RateInput{PerSecond: ptr(10.0), Burst: ptr[int64](20)}, Concurrency: ptr[int64](3),
		Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](1000)}}})
	now := time.Now()
	cases := []struct {
		status       string
		pastDueSince *time.Time
		graceEndsAt  *time.Time
		wantPlan     string
	}{
		{"active", nil, nil, paid},
		{"trialing", nil, nil, paid},
		{"past_due", ptr(now.Add(-time.Minute)), nil, paid},                        // within GracePeriod (1h)
		{"past_due", ptr(now.Add(-2 * time.Hour)), nil, b.free},                    // GracePeriod over
		{"past_due", ptr(now.Add(-48 * time.Hour)), ptr(now.Add(time.Hour)), paid}, // grace_ends_at wins
		{"past_due", nil, ptr(now.Add(-time.Second)), b.free},
		{"unpaid", nil, nil, b.free},
		{"canceled", nil, nil, b.free},
		{"incomplete_expired", nil, nil, b.free},
		{"paused", nil, nil, b.free},
	}
	for _, tc := range cases {
		t.Run(tc.status, func(t *testing.T) {
			tn := b.mustTenant(t, paid)
			if _, err := b.pool.Exec(b.ctx, `UPDATE tenants SET stripe_features = '{analytics}' WHERE id = $1`, tn.ID); err != nil {
				t.Fatal(err)
			}
			start, end := now.Add(-24*time.Hour).UTC().Truncate(time.Microsecond), now.Add(24*time.Hour).UTC().Truncate(time.Microsecond)
			_, err := b.pool.Exec(b.ctx, `
INSERT INTO subscriptions (id, tenant_id, stripe_customer_id, status, current_period_start, current_period_end, past_due_since, grace_ends_at)
VALUES ($1, $2, 'cus_x', $3, $4, $5, $6, $7)`, uniq("sub"), tn.ID, tc.status, start, end, tc.pastDueSince, tc.graceEndsAt)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := b.svc.SnapshotFromPostgres(b.ctx, tn.ID)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Plan != tc.wantPlan || snap.Status != tc.status {
				t.Fatalf("plan %q status %q, want %q %q", snap.Plan, snap.Status, tc.wantPlan, tc.status)
			}
			if !snap.PeriodStart.Equal(start) || !snap.PeriodEnd.Equal(end) || !snap.NextPeriodEnd.After(end) {
				t.Fatalf("period %v-%v next %v, want the subscription's %v-%v", snap.PeriodStart, snap.PeriodEnd, snap.NextPeriodEnd, start, end)
			}
			if tc.wantPlan == paid {
				if !slices.Equal(snap.Features, []string{"analytics", "exports"}) || snap.Concurrency != 3 || snap.Rate == nil || snap.Rate.Burst != 20 {
					t.Fatalf("paid snapshot = %+v", snap)
				}
			} else if len(snap.Features) != 0 || snap.Quotas["requests"].Limit != 100 {
				t.Fatalf("fallback snapshot kept paid access: %+v", snap)
			} else if snap.Rate == nil || *snap.Rate != (limiter.Rate{PerSecond: 10, Burst: 20}) || snap.Concurrency != 3 {
				// The default plan sets neither: the paid plan's limits stay
				// rather than become unlimited.
				t.Fatalf("fallback snapshot lifted the paid plan's rate or concurrency: %+v", snap)
			}
		})
	}
}

func TestSnapshotWithoutSubscription(t *testing.T) {
	b := setup(t)
	tn := b.mustTenant(t, b.free)
	snap, err := b.svc.SnapshotFromPostgres(b.ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != "active" || snap.Plan != b.free || snap.Version != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}
	now := time.Now()
	if snap.PeriodStart.After(now) || !snap.PeriodEnd.After(now) || snap.PeriodStart.Sub(tn.PeriodAnchor).Abs() > time.Millisecond {
		t.Fatalf("period %v-%v does not start at the anchor %v", snap.PeriodStart, snap.PeriodEnd, tn.PeriodAnchor)
	}
	for _, id := range []string{"nope", "00000000-0000-0000-0000-000000000000"} {
		if _, err := b.svc.SnapshotFromPostgres(b.ctx, id); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("Snapshot(%q) = %v", id, err)
		}
		if _, err := b.svc.ReloadSnapshot(b.ctx, id); !errors.Is(err, limiter.ErrUnknownTenant) || apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("ReloadSnapshot(%q) = %v", id, err)
		}
	}
}

func TestSnapshotAppliesQuotaOverrides(t *testing.T) {
	b := setup(t)
	tn := b.mustTenant(t, b.free) // requests: 100 hard
	_, err := b.pool.Exec(b.ctx, `
INSERT INTO quota_overrides (tenant_id, meter, extra, quota_limit, mode, expires_at, created_at) VALUES
 ($1, 'requests', 50, NULL, NULL, NULL, now() - interval '3 minutes'),
 ($1, 'requests', NULL, NULL, 'soft', NULL, now() - interval '2 minutes'),
 ($1, 'requests', 1000000, NULL, NULL, now() - interval '1 second', now() - interval '1 minute'),
 ($1, 'exports', NULL, 7, NULL, NULL, now()),
 ($1, 'uploads', 5, NULL, NULL, NULL, now())`, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := b.svc.BumpAndPublish(b.ctx, tn.ID, "override added")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]limiter.Quota{"requests": {Limit: 150, Mode: "soft"}, "exports": {Limit: 7, Mode: "hard"}}
	if len(snap.Quotas) != len(want) || snap.Quotas["requests"] != want["requests"] || snap.Quotas["exports"] != want["exports"] {
		t.Fatalf("quotas = %+v, want %+v (expired ignored, extra on an unlimited meter keeps it unlimited)", snap.Quotas, want)
	}
	if snap.Version != 2 {
		t.Fatalf("Refresh did not bump: %d", snap.Version)
	}
	stored, ok, err := b.store.Snapshot(b.ctx, tn.ID)
	if err != nil || !ok || stored.Version != 2 {
		t.Fatalf("Refresh did not publish: %+v %v %v", stored, ok, err)
	}
}

func TestSetPlanAndCurrent(t *testing.T) {
	b := setup(t)
	big := uniq("big")
	b.mustPlan(t, catalogue.PlanInput{Key: big, Quotas: map[string]*catalogue.QuotaInput{"requests": {Limit: ptr[int64](5000)}}})
	tn := b.mustTenant(t, b.free)
	d, err := b.svc.SetPlan(b.ctx, tn.ID, big, "")
	if err != nil {
		t.Fatal(err)
	}
	if d.Plan != big || d.EffectivePlan != big || d.Entitlements.Version != 2 || d.Entitlements.Quotas["requests"].Limit != 5000 {
		t.Fatalf("detail = %+v", d)
	}
	cur, err := b.svc.CachedSnapshot(b.ctx, tn.ID)
	if err != nil || cur.Version != 2 || cur.Plan != big {
		t.Fatalf("Current = %+v, %v", cur, err)
	}
	// Redis lost the snapshot: CachedSnapshot rebuilds it from Postgres and writes it back.
	if err := b.store.DeleteSnapshot(b.ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	if cur, err := b.svc.CachedSnapshot(b.ctx, tn.ID); err != nil || cur.Version != 2 {
		t.Fatalf("Current after loss = %+v, %v", cur, err)
	}
	if _, ok, _ := b.store.Snapshot(b.ctx, tn.ID); !ok {
		t.Fatal("Current did not write the snapshot back")
	}
	if _, err := b.svc.SetPlan(b.ctx, tn.ID, "no-such-plan", ""); !slices.Equal(fieldsOf(err), []string{"plan"}) {
		t.Fatalf("unknown plan: %v", err)
	}
	if _, err := b.svc.SetPlan(b.ctx, "00000000-0000-0000-0000-000000000000", big, ""); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown tenant: %v", err)
	}
	var n int
	if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM entitlement_versions WHERE tenant_id = $1`, tn.ID).Scan(&n); err != nil || n != 2 {
		t.Fatalf("entitlement_versions rows = %d, %v", n, err)
	}
}

// With Redis unreachable, every change is still saved and answers success
// (committed means done; the publish is retried, then left to the
// limiter's loader): a new tenant, a plan change, an override added and
// removed. An error after the commit would make a client retry a change
// that was made: a second override, or a delete that then answers 404.
func TestRedisDownWhilePublishing(t *testing.T) {
	b := setup(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { dead.Close() })
	svc := entitlements.NewService(b.pool, limitstore.New(dead, b.prefix), nil, entitlements.Options{DefaultPlan: b.free})
	tn, err := svc.CreateTenant(b.ctx, entitlements.TenantInput{Name: "Offline", Plan: b.free})
	if err != nil || tn.ID == "" {
		t.Fatalf("CreateTenant with Redis down: %+v %v", tn, err)
	}
	if _, err = svc.SetPlan(b.ctx, tn.ID, b.free, "again"); err != nil {
		t.Fatalf("SetPlan with Redis down: %v, want success (the change is committed)", err)
	}
	o, err := svc.CreateOverride(b.ctx, tn.ID, entitlements.OverrideInput{Meter: "requests", Extra: ptr[int64](5)})
	if err != nil || o.ID == "" {
		t.Fatalf("CreateOverride with Redis down: %+v %v, want success", o, err)
	}
	if err := svc.DeleteOverride(b.ctx, tn.ID, o.ID); err != nil {
		t.Fatalf("DeleteOverride with Redis down: %v, want success", err)
	}
	if snap, err := b.svc.SnapshotFromPostgres(b.ctx, tn.ID); err != nil || snap.Version != 4 {
		t.Fatalf("the changes were not all saved: %+v %v (want version 4)", snap, err)
	}
}
