package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
	"github.com/tollgatehq/tollgate/limiter"
)

// leaseOf returns the lease of a POST /v1/check answer.
func leaseOf(t *testing.T, a answer) (string, time.Time) {
	t.Helper()
	l, _ := a.body["lease"].(map[string]any)
	id, _ := l["id"].(string)
	exp, err := time.Parse(time.RFC3339Nano, func() string { s, _ := l["expires_at"].(string); return s }())
	if a.status != http.StatusOK || id == "" || err != nil {
		t.Fatalf("check with concurrency: %d %s (want 200 with lease.id and lease.expires_at)", a.status, a.raw)
	}
	return id, exp
}

// POST /v1/check with "concurrency": true holds a slot of the plan's
// concurrency limit until DELETE /v1/leases/{id} (the tenant's own lease
// only) or its expiry.
func TestConcurrencyLeasesOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	const limit = 3
	plan := randName("p")
	in.admin(t, http.MethodPost, "/admin/v1/plans", map[string]any{"key": plan, "name": plan, "concurrency": limit}, http.StatusCreated)
	_, keyA := in.newTenant(t, plan)
	_, keyB := in.newTenant(t, plan)
	check := func(key string, body any) answer { return in.call(t, http.MethodPost, "/v1/check", key, body) }
	conc := map[string]any{"concurrency": true}

	var ids []string
	for i := 0; i < limit; i++ {
		before := time.Now()
		id, exp := leaseOf(t, check(keyA, conc))
		// The default LeaseTTL is 60 s (Redis's clock, so allow skew).
		if d := exp.Sub(before); d < 50*time.Second || d > 70*time.Second {
			t.Fatalf("lease %d expires_at %v, %v from now; want about 60s", i, exp, d)
		}
		ids = append(ids, id)
	}
	if ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
		t.Fatalf("lease ids repeat: %v", ids)
	}
	a := check(keyA, conc)
	if a.status != http.StatusTooManyRequests || a.body["policy"] != limiter.PolicyConcurrency {
		t.Fatalf("check %d of a concurrency limit of %d: %d %s (want 429 policy concurrency)", limit+1, limit, a.status, a.raw)
	}
	// A check without concurrency takes no slot and is not held by them;
	// tenant B's slots are its own.
	if a := check(keyA, nil); a.status != http.StatusOK || a.body["lease"] != nil {
		t.Fatalf("check without concurrency: %d %s", a.status, a.raw)
	}
	idB, _ := leaseOf(t, check(keyB, conc))

	del := func(key, id string) answer { return in.call(t, http.MethodDelete, "/v1/leases/"+id, key, nil) }
	// Another tenant's lease, a made-up one and a malformed one: 404, and
	// nothing is freed.
	for _, c := range []struct{ key, id, what string }{
		{keyB, ids[0], "tenant B releasing A's lease"},
		{keyA, idB, "tenant A releasing B's lease"},
		{keyA, "0123456789abcdef01234567", "an unknown lease"},
		{keyA, "not-a-lease", "a malformed id"},
	} {
		if a := del(c.key, c.id); a.status != http.StatusNotFound || a.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s: %d %s (%s), want 404 problem+json", c.what, a.status, a.raw, a.header.Get("Content-Type"))
		}
	}
	if a := check(keyA, conc); a.status != http.StatusTooManyRequests {
		t.Fatalf("after refused DELETEs: %d %s (a slot was freed)", a.status, a.raw)
	}
	if a := in.call(t, http.MethodDelete, "/v1/leases/"+ids[0], "", nil); a.status != http.StatusUnauthorized {
		t.Fatalf("DELETE without a key: %d %s", a.status, a.raw)
	}

	// The owner's DELETE frees one slot, once.
	if a := del(keyA, ids[0]); a.status != http.StatusNoContent {
		t.Fatalf("releasing own lease: %d %s", a.status, a.raw)
	}
	if a := del(keyA, ids[0]); a.status != http.StatusNotFound {
		t.Fatalf("releasing it twice: %d %s", a.status, a.raw)
	}
	ids[0], _ = leaseOf(t, check(keyA, conc))
	if a := check(keyA, conc); a.status != http.StatusTooManyRequests {
		t.Fatalf("after one release and one take: %d %s", a.status, a.raw)
	}
	if a := del(keyB, idB); a.status != http.StatusNoContent {
		t.Fatalf("B releasing its own lease: %d %s", a.status, a.raw)
	}
}

// An unreleased lease expires after LEASE_TTL (limiter.Options.LeaseTTL)
// and frees its slot.
func TestConcurrencyLeaseExpires(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	const ttl = 3 * time.Second
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{opts: limiter.Options{LeaseTTL: ttl}})
	plan := randName("p")
	in.admin(t, http.MethodPost, "/admin/v1/plans", map[string]any{"key": plan, "name": plan, "concurrency": 2}, http.StatusCreated)
	_, key := in.newTenant(t, plan)
	conc := map[string]any{"concurrency": true}
	check := func() answer { return in.call(t, http.MethodPost, "/v1/check", key, conc) }

	start := time.Now()
	id, exp := leaseOf(t, check())
	if d := exp.Sub(start); d < ttl-time.Second || d > ttl+2*time.Second {
		t.Fatalf("expires_at %v from now, want about %v", d, ttl)
	}
	leaseOf(t, check())
	a := check()
	if time.Since(start) < ttl && a.status != http.StatusTooManyRequests {
		t.Fatalf("third check on a limit of 2: %d %s", a.status, a.raw)
	}
	took := testkit.Eventually(t, 30*time.Second, "an expired lease frees its slot", func() bool {
		a := check()
		if a.status == http.StatusOK {
			leaseOf(t, a)
			return true
		}
		if a.status != http.StatusTooManyRequests {
			t.Fatalf("while waiting for expiry: %d %s", a.status, a.raw)
		}
		return false
	})
	if time.Since(start) < ttl-500*time.Millisecond {
		t.Fatalf("a slot came free after %v, before the lease TTL %v", took, ttl)
	}
	// The expired lease is gone: releasing it frees nothing.
	if a := in.call(t, http.MethodDelete, "/v1/leases/"+id, key, nil); a.status != http.StatusNotFound {
		t.Fatalf("releasing an expired lease: %d %s", a.status, a.raw)
	}
}
