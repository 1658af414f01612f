package audit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgatehq/tollgate/internal/audit"
	"github.com/tollgatehq/tollgate/internal/audit/readers"
	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The rows these tests act on are written with SQL: the audit log only
// reads the other packages' tables, and what it reads is what is checked.

func uniq(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scan(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// field is one top-level field of a state, as compact JSON; "" when the
// state is null or lacks the field.
func field(t *testing.T, raw json.RawMessage, key string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("state %s: %v", raw, err)
	}
	return string(m[key])
}

// only returns the newest entry of actor, failing unless there is exactly
// one.
func only(t *testing.T, l *audit.Log, actor string) audit.Entry {
	t.Helper()
	es, err := l.List(t.Context(), audit.Filter{Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 {
		t.Fatalf("%d entries of %s, want 1: %+v", len(es), actor, es)
	}
	return es[0]
}

// Do records the state of each kind of subject before and after the
// action, as the HTTP layers name it: the fields people compare, never a
// credential's secret.
func TestDoRecordsEachSubjectsStateBeforeAndAfter(t *testing.T) {
	pool := pgtest.New(t)
	l := audit.New(pool, nil)
	// Every subject is read through its owner, as cmd/api registers them.
	ins, err := jobs.NewInsertClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ents := entitlements.NewService(pool, nil, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	bill, err := billing.New(pool, ents, cat, ins, nil, billing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := credentials.New(pool, ents, nil, credentials.Options{})
	readers.Register(l, ents, cat, keys, bill, nil)
	planA, planB := uniq("plan-a"), uniq("plan-b")
	exec(t, pool, `INSERT INTO plans (key, name) VALUES ($1, 'A'), ($2, 'B')`, planA, planB)
	tenant := scan(t, pool, `INSERT INTO tenants (name, plan_key) VALUES ('Audit Co', $1) RETURNING id::text`, planA)
	key := scan(t, pool, `INSERT INTO api_keys (tenant_id, prefix, hash, name) VALUES ($1, 'tgk_abc', decode(repeat('ab', 32), 'hex'), 'ci') RETURNING id::text`, tenant)
	event := uniq("evt")
	exec(t, pool, `INSERT INTO stripe_events (id, type, tenant_id, event_created, payload, status, attempts, last_error)
		VALUES ($1, 'customer.subscription.updated', $2, now(), '{}', 'failed', 1, 'boom')`, event, tenant)
	price := uniq("price_addon")
	const tokenHash = "cd"
	var tokenID string

	for _, c := range []struct {
		name   string
		action string
		sub    func() audit.Subject // named when the case runs (the token's id)
		fn     func(t *testing.T) audit.Subject
		// wantTenant, wantPlan, wantTarget are the entry's subject columns.
		wantTenant, wantPlan, wantTarget func() string
		// before and after: field → compact JSON ({token} = the service
		// token's id, known once issued); nil = a null state.
		before, after map[string]string
	}{{
		name: "tenant plan change", action: "tenant.plan_change", sub: func() audit.Subject { return audit.Subject{TenantID: tenant} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `UPDATE tenants SET plan_key = $1 WHERE id = $2`, planB, tenant)
			return audit.Subject{}
		},
		wantTenant: func() string { return tenant }, wantPlan: none, wantTarget: none,
		before: map[string]string{"plan": `"` + planA + `"`, "name": `"Audit Co"`}, after: map[string]string{"plan": `"` + planB + `"`},
	}, {
		name: "plan edit", action: "plan.edit", sub: func() audit.Subject { return audit.Subject{PlanKey: planB} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `UPDATE plans SET name = 'B+' WHERE key = $1`, planB)
			return audit.Subject{}
		},
		wantTenant: none, wantPlan: func() string { return planB }, wantTarget: none,
		before: map[string]string{"name": `"B"`, "tenants": "1"}, after: map[string]string{"name": `"B+"`},
	}, {
		// An API key names its tenant, whose state holds the key.
		name: "api key revoke", action: "api_key.revoke", sub: func() audit.Subject { return audit.Subject{KeyID: key} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, key)
			return audit.Subject{}
		},
		wantTenant: func() string { return tenant }, wantPlan: none, wantTarget: func() string { return key },
		before: map[string]string{"api_keys": `[{"id":"` + key + `","name":"ci","prefix":"tgk_abc","revoked":false}]`},
		after:  map[string]string{"api_keys": `[{"id":"` + key + `","name":"ci","prefix":"tgk_abc","revoked":true}]`},
	}, {
		name: "stripe event replay", action: "stripe_event.replay", sub: func() audit.Subject { return audit.Subject{EventID: event} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `UPDATE stripe_events SET status = 'pending' WHERE id = $1`, event)
			return audit.Subject{}
		},
		wantTenant: func() string { return tenant }, wantPlan: none, wantTarget: none,
		before: map[string]string{"status": `"failed"`, "last_error": `"boom"`}, after: map[string]string{"status": `"pending"`},
	}, {
		name: "add-on created", action: "addon.put", sub: func() audit.Subject { return audit.Subject{AddonPriceID: price, Target: price} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `INSERT INTO addon_grants (stripe_price_id, name, quotas, features) VALUES ($1, 'Boost', '{"requests": 1000}', '{exports}')`, price)
			return audit.Subject{}
		},
		wantTenant: none, wantPlan: none, wantTarget: func() string { return price },
		before: nil, after: map[string]string{"name": `"Boost"`, "quotas": `{"requests":1000}`, "features": `["exports"]`},
	}, {
		name: "add-on replaced", action: "addon.put", sub: func() audit.Subject { return audit.Subject{AddonPriceID: price, Target: price} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `UPDATE addon_grants SET quotas = '{"requests": 5000}', features = '{}' WHERE stripe_price_id = $1`, price)
			return audit.Subject{}
		},
		wantTenant: none, wantPlan: none, wantTarget: func() string { return price },
		before: map[string]string{"quotas": `{"requests":1000}`, "features": `["exports"]`},
		after:  map[string]string{"name": `"Boost"`, "quotas": `{"requests":5000}`, "features": `[]`},
	}, {
		name: "add-on deleted", action: "addon.delete", sub: func() audit.Subject { return audit.Subject{AddonPriceID: price, Target: price} },
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `DELETE FROM addon_grants WHERE stripe_price_id = $1`, price)
			return audit.Subject{}
		},
		wantTenant: none, wantPlan: none, wantTarget: func() string { return price },
		before: map[string]string{"name": `"Boost"`, "quotas": `{"requests":5000}`}, after: nil,
	}, {
		// A create names its subject only in its answer.
		name: "service token issued", action: "service_token.issue", sub: func() audit.Subject { return audit.Subject{} },
		fn: func(t *testing.T) audit.Subject {
			tokenID = scan(t, pool, `INSERT INTO service_tokens (prefix, hash, name) VALUES ('tgs_secretprefix', decode(repeat($1, 32), 'hex'), 'edge') RETURNING id::text`, tokenHash)
			return audit.Subject{ServiceTokenID: tokenID, Target: tokenID}
		},
		wantTenant: none, wantPlan: none, wantTarget: func() string { return tokenID },
		before: nil, after: map[string]string{"id": `"{token}"`, "name": `"edge"`, "revoked": "false", "revoked_at": "null"},
	}, {
		name: "service token revoked", action: "service_token.revoke",
		sub: func() audit.Subject { return audit.Subject{ServiceTokenID: tokenID, Target: tokenID} }, // issued by the case before
		fn: func(t *testing.T) audit.Subject {
			exec(t, pool, `UPDATE service_tokens SET revoked_at = now() WHERE id = $1`, tokenID)
			return audit.Subject{}
		},
		wantTenant: none, wantPlan: none, wantTarget: func() string { return tokenID },
		before: map[string]string{"name": `"edge"`, "revoked": "false"}, after: map[string]string{"name": `"edge"`, "revoked": "true"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			actor := uniq("auditor")
			ctx := audit.WithActor(t.Context(), audit.Actor{Name: actor, Via: audit.ViaConsole})
			if err := l.Do(ctx, c.action, c.sub(), func() (audit.Subject, error) { return c.fn(t), nil }); err != nil {
				t.Fatal(err)
			}
			e := only(t, l, actor)
			if e.Action != c.action || e.Via != audit.ViaConsole || e.At.IsZero() ||
				e.TenantID != c.wantTenant() || e.PlanKey != c.wantPlan() || e.Target != c.wantTarget() {
				t.Fatalf("entry %+v, want action %s tenant %q plan %q target %q", e, c.action, c.wantTenant(), c.wantPlan(), c.wantTarget())
			}
			for what, st := range map[string]struct {
				raw  json.RawMessage
				want map[string]string
			}{"before": {e.Before, c.before}, "after": {e.After, c.after}} {
				if st.want == nil {
					if string(st.raw) != "null" {
						t.Errorf("%s = %s, want null", what, st.raw)
					}
					continue
				}
				for k, want := range st.want {
					want = strings.ReplaceAll(want, "{token}", tokenID)
					if got := field(t, st.raw, k); got != want {
						t.Errorf("%s.%s = %s, want %s (state %s)", what, k, got, want, st.raw)
					}
				}
			}
			// The trail is read by every admin: no credential's secret, nor
			// the part of it a prefix shows, nor its hash.
			for _, raw := range []json.RawMessage{e.Before, e.After} {
				for _, secret := range []string{"tgs_secretprefix", "hash", strings.Repeat(tokenHash, 8)} {
					if strings.Contains(string(raw), secret) {
						t.Errorf("state %s holds %q", raw, secret)
					}
				}
			}
		})
	}
}

func none() string { return "" }

// A failed action did not happen: nothing is recorded, and its error is
// the caller's.
func TestDoRecordsNothingWhenTheActionFails(t *testing.T) {
	pool := pgtest.New(t)
	l := audit.New(pool, nil)
	actor := uniq("failing")
	ctx := audit.WithActor(t.Context(), audit.Actor{Name: actor, Via: audit.ViaAPI})
	boom := errors.New("boom")
	if err := l.Do(ctx, "plan.edit", audit.Subject{PlanKey: "nope"}, func() (audit.Subject, error) { return audit.Subject{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want the action's error", err)
	}
	if es, err := l.List(ctx, audit.Filter{Actor: actor}); err != nil || len(es) != 0 {
		t.Fatalf("recorded %+v (%v)", es, err)
	}
	// A nil Log runs the action and records nothing.
	var nl *audit.Log
	ran := false
	if err := nl.Do(ctx, "plan.edit", audit.Subject{}, func() (audit.Subject, error) { ran = true; return audit.Subject{}, nil }); err != nil || !ran {
		t.Fatalf("nil log: ran %v, err %v", ran, err)
	}
}

// List filters by tenant, plan and actor (together too), newest first,
// and pages back with BeforeID.
func TestListFiltersByTenantPlanAndActorAndPages(t *testing.T) {
	pool := pgtest.New(t)
	l := audit.New(pool, nil)
	plan := uniq("plan")
	exec(t, pool, `INSERT INTO plans (key, name) VALUES ($1, 'P')`, plan)
	t1 := scan(t, pool, `INSERT INTO tenants (name, plan_key) VALUES ('One', $1) RETURNING id::text`, plan)
	t2 := scan(t, pool, `INSERT INTO tenants (name, plan_key) VALUES ('Two', $1) RETURNING id::text`, plan)
	ann, bob := uniq("ann"), uniq("bob")
	rec := func(actor string, e audit.Entry) {
		t.Helper()
		if err := l.Record(audit.WithActor(t.Context(), audit.Actor{Name: actor, Via: audit.ViaAPI}), e); err != nil {
			t.Fatal(err)
		}
	}
	rec(ann, audit.Entry{Action: "a1", TenantID: t1})
	rec(bob, audit.Entry{Action: "b1", TenantID: t1})
	rec(ann, audit.Entry{Action: "a2", PlanKey: plan})
	rec(ann, audit.Entry{Action: "a3", TenantID: t2})
	rec(bob, audit.Entry{Action: "b2", PlanKey: plan})

	actions := func(f audit.Filter) string {
		t.Helper()
		es, err := l.List(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Action)
		}
		return strings.Join(out, ",")
	}
	for name, c := range map[string]struct {
		f    audit.Filter
		want string
	}{
		"tenant":         {audit.Filter{TenantID: t1}, "b1,a1"},
		"other tenant":   {audit.Filter{TenantID: t2}, "a3"},
		"plan":           {audit.Filter{PlanKey: plan}, "b2,a2"},
		"actor":          {audit.Filter{Actor: ann}, "a3,a2,a1"},
		"tenant+actor":   {audit.Filter{TenantID: t1, Actor: ann}, "a1"},
		"plan+actor":     {audit.Filter{PlanKey: plan, Actor: bob}, "b2"},
		"unknown actor":  {audit.Filter{Actor: uniq("nobody")}, ""},
		"not a tenant":   {audit.Filter{TenantID: "not-a-uuid"}, ""},
		"unknown tenant": {audit.Filter{TenantID: "00000000-0000-0000-0000-000000000000"}, ""},
	} {
		if got := actions(c.f); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
	// Pages: the last id of one page is the BeforeID of the next.
	page, err := l.List(t.Context(), audit.Filter{Actor: ann, Limit: 2})
	if err != nil || len(page) != 2 {
		t.Fatalf("first page %+v (%v)", page, err)
	}
	if got := actions(audit.Filter{Actor: ann, Limit: 2, BeforeID: page[1].ID}); got != "a1" {
		t.Fatalf("second page %q, want a1", got)
	}
}

// Without an actor in ctx an entry still names someone, and a way in the
// table accepts.
func TestRecordWithoutActorIsUnknownViaAPI(t *testing.T) {
	pool := pgtest.New(t)
	l := audit.New(pool, nil)
	tenant := scan(t, pool, `
		WITH p AS (INSERT INTO plans (key, name) VALUES ($1, 'P') RETURNING key)
		INSERT INTO tenants (name, plan_key) SELECT 'Anon', key FROM p RETURNING id::text`, uniq("plan"))
	if err := l.Record(context.WithoutCancel(t.Context()), audit.Entry{Action: "x", TenantID: tenant}); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(audit.WithActor(t.Context(), audit.Actor{Name: "odd", Via: "carrier pigeon"}), audit.Entry{Action: "y", TenantID: tenant}); err != nil {
		t.Fatal(err)
	}
	es, err := l.List(t.Context(), audit.Filter{TenantID: tenant})
	if err != nil || len(es) != 2 {
		t.Fatalf("%+v (%v)", es, err)
	}
	if es[1].Actor != "unknown" || es[1].Via != audit.ViaAPI || es[0].Actor != "odd" || es[0].Via != audit.ViaAPI {
		t.Fatalf("entries %+v", es)
	}
}
