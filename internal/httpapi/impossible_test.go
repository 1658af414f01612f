package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/credits"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// A cost the plan can never admit is 422 naming the limit, never a 429 a
// client would retry forever; a meter no plan defines is 422; a meter the
// tenant's plan leaves unlimited is allowed.
func TestImpossibleCostIs422(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 1, "burst": 10}, map[string]any{
		"requests": map[string]any{"limit": 100, "mode": "hard"},
		"exports":  map[string]any{"limit": 5, "mode": "hard"},
		"emails":   map[string]any{"limit": 5, "mode": "soft"},
	})
	in.newPlan(t, nil, map[string]any{"sms": map[string]any{"limit": 5, "mode": "hard"}})
	_, key := in.newTenant(t, plan)
	check := func(body map[string]any) answer { return in.call(t, http.MethodPost, "/v1/check", key, body) }

	a := check(map[string]any{"cost": 11})
	if a.status != http.StatusUnprocessableEntity || a.body["policy"] != "rate" || a.body["limit"] != 10.0 || a.header.Get("Retry-After") != "" {
		t.Fatalf("cost above the burst: %d %s", a.status, a.raw)
	}
	// The 422 carries the rate-limit headers every /v1 answer promises.
	assertLimitHeaders(t, "422 for a cost above the burst", a)
	a = check(map[string]any{"cost": 6, "meter": "exports"})
	if a.status != http.StatusUnprocessableEntity || a.body["policy"] != "exports" || a.body["limit"] != 5.0 {
		t.Fatalf("cost above a hard quota: %d %s", a.status, a.raw)
	}
	// Nothing was taken by the 422s: the whole burst is still there.
	if a := check(map[string]any{"cost": 10}); a.status != http.StatusOK {
		t.Fatalf("cost 10 after the 422s: %d %s", a.status, a.raw)
	}
	// An ordinary refusal is still a 429.
	if a := check(map[string]any{"cost": 5}); a.status != http.StatusTooManyRequests {
		t.Fatalf("burst used up: %d %s", a.status, a.raw)
	}
	// A soft quota admits over its limit (recorded as overage)... once the
	// bucket has refilled enough.
	testkit.Eventually(t, 15*time.Second, "bucket refilled", func() bool {
		return check(map[string]any{"cost": 6, "meter": "emails"}).status == http.StatusOK
	})
	// Unknown meter: 422 naming the field; a meter only another plan
	// defines is unlimited for this tenant.
	testkit.Eventually(t, 5*time.Second, "bucket refilled", func() bool {
		a := check(map[string]any{"meter": "exportz"})
		if a.status == http.StatusTooManyRequests {
			return false
		}
		if a.status != http.StatusUnprocessableEntity || !errorFields(a)["meter"] {
			t.Fatalf("unknown meter: %d %s", a.status, a.raw)
		}
		return true
	})
	testkit.Eventually(t, 5*time.Second, "bucket refilled", func() bool {
		a := check(map[string]any{"meter": "sms"})
		if a.status == http.StatusTooManyRequests {
			return false
		}
		if a.status != http.StatusOK {
			t.Fatalf("meter left unlimited by the plan: %d %s", a.status, a.raw)
		}
		return true
	})
}

// A cost over a hard quota's included units is not "never" while credit
// grants can cover it: with a grant of the meter the refusal is a 429
// (Retry-After to the grant that takes effect), not a 422; a grant voided
// makes it 422 again; a top-up of the meter on sale makes it a 429 too,
// since buying one admits it.
func TestCostOverIncludedWithGrantsIs429(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{credits: true})
	meter := "calls" + strings.ToLower(randName(""))
	plan := in.newPlan(t, nil, map[string]any{meter: map[string]any{"limit": 100, "mode": "hard"}})
	tenant, key := in.newTenant(t, plan)
	check := func(cost int) answer {
		return in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": cost, "meter": meter})
	}
	if a := check(150); a.status != http.StatusUnprocessableEntity || a.body["policy"] != meter {
		t.Fatalf("cost over the included quota, no grants: %d %s", a.status, a.raw)
	}

	ctx := t.Context()
	amount := int64(500)
	if _, err := in.creds.Create(ctx, tenant, credits.GrantInput{Meter: meter, Amount: &amount}); err != nil {
		t.Fatal(err)
	}
	// The limiter learns of the grant within a second (its pub/sub
	// announcement), and the 422 above is remembered for two (CanGrow's
	// cache); until then the refusal takes nothing.
	testkit.Eventually(t, 10*time.Second, "the grant drawn", func() bool {
		switch a := check(150); a.status {
		case http.StatusOK:
			return true
		case http.StatusTooManyRequests, http.StatusUnprocessableEntity:
			return false
		default:
			t.Fatalf("cost over the included quota with a grant: %d %s", a.status, a.raw)
			return false
		}
	})
	// 450 left of the grant, none included: 500 is refused, as a 429.
	a := check(500)
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
		t.Fatalf("cost over included and grants together: %d %s (Retry-After %q)", a.status, a.raw, a.header.Get("Retry-After"))
	}
	// A grant that takes effect in an hour: still a 429, Retry-After to it.
	hour, later := int64(1000), time.Now().Add(time.Hour)
	if _, err := in.creds.Create(ctx, tenant, credits.GrantInput{Meter: meter, Amount: &hour, EffectiveAt: &later}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "Retry-After to the pending grant", func() bool {
		a := check(500)
		if a.status != http.StatusTooManyRequests {
			t.Fatalf("with a pending grant: %d %s", a.status, a.raw)
		}
		ra, _ := strconv.Atoi(a.header.Get("Retry-After"))
		return ra > 3000 && ra <= 3600
	})

	// Both voided: nothing can cover it any more.
	list, err := in.creds.List(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list {
		if _, err := in.creds.Void(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Voids stop the draws within a second; the 429s above are
	// remembered for two seconds.
	testkit.Eventually(t, 10*time.Second, "no grant drawn after the voids", func() bool {
		return check(150).status == http.StatusUnprocessableEntity
	})
	// A top-up of the meter on sale: buying one admits it.
	n := int64(1000)
	if _, _, err := in.creds.PutTopup(ctx, "price_"+randName(""), credits.TopupInput{Meter: meter, Amount: &n}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a 429 with a top-up on sale", func() bool {
		return check(150).status == http.StatusTooManyRequests
	})
}
