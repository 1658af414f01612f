package httpapi

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// TestReserveSettleOverHTTP: "reserve": true returns a reservation id;
// settle and cancel by id with the tenant's key; another tenant's id is
// 404; a charge beyond the limit is recorded (later checks refused);
// GET /v1/usage shows the settled figures; bad input names the field.
func TestReserveSettleOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, map[string]any{"per_second": 1000, "burst": 1000}, map[string]any{"tokens": map[string]any{"limit": 100, "mode": "hard"}})
	_, key := in.newTenant(t, plan)
	_, otherKey := in.newTenant(t, plan)

	reserve := func(est int) (string, answer) {
		t.Helper()
		r := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": est, "meter": "tokens", "reserve": true})
		if r.status != http.StatusOK {
			return "", r
		}
		rsv, _ := r.body["reservation"].(map[string]any)
		id, _ := rsv["id"].(string)
		if id == "" || rsv["estimate"] != float64(est) || rsv["expires_at"] == nil {
			t.Fatalf("reservation in %s", r.raw)
		}
		return id, r
	}
	used := func() float64 {
		t.Helper()
		r := in.call(t, http.MethodGet, "/v1/usage", key, nil)
		meters, _ := r.body["meters"].([]any)
		for _, m := range meters {
			if mm, _ := m.(map[string]any); mm["meter"] == "tokens" {
				return mm["used"].(float64)
			}
		}
		t.Fatalf("no tokens meter in %s", r.raw)
		return 0
	}

	id, _ := reserve(40)
	if u := used(); u != 40 {
		t.Fatalf("used %v after reserving 40", u)
	}
	if r := in.call(t, http.MethodPost, "/v1/reservations/"+id+"/settle", otherKey, map[string]any{"cost": 1}); r.status != http.StatusNotFound {
		t.Fatalf("another tenant settles: %d %s", r.status, r.raw)
	}
	if r := in.call(t, http.MethodDelete, "/v1/reservations/"+id, otherKey, nil); r.status != http.StatusNotFound {
		t.Fatalf("another tenant cancels: %d %s", r.status, r.raw)
	}
	for _, body := range []any{map[string]any{"cost": -1}, map[string]any{"cost": 1.5}, map[string]any{}, "{"} {
		r := in.call(t, http.MethodPost, "/v1/reservations/"+id+"/settle", key, body)
		if r.status != http.StatusBadRequest {
			t.Fatalf("settle %v: %d %s", body, r.status, r.raw)
		}
	}
	r := in.call(t, http.MethodPost, "/v1/reservations/"+id+"/settle", key, map[string]any{"cost": 25})
	if r.status != http.StatusOK || r.body["estimate"] != float64(40) || r.body["cost"] != float64(25) || r.header.Get("RateLimit") == "" {
		t.Fatalf("settle: %d %s %v", r.status, r.raw, r.header)
	}
	if u := used(); u != 25 {
		t.Fatalf("used %v after settling 25", u)
	}
	if r := in.call(t, http.MethodPost, "/v1/reservations/"+id+"/settle", key, map[string]any{"cost": 25}); r.status != http.StatusNotFound {
		t.Fatalf("settled twice: %d %s", r.status, r.raw)
	}
	// Cancel.
	id, _ = reserve(30)
	if r := in.call(t, http.MethodDelete, "/v1/reservations/"+id, key, nil); r.status != http.StatusNoContent {
		t.Fatalf("cancel: %d %s", r.status, r.raw)
	}
	if u := used(); u != 25 {
		t.Fatalf("used %v after cancelling", u)
	}
	// Beyond the limit: recorded, never refused; what follows is refused.
	id, _ = reserve(70)
	if r := in.call(t, http.MethodPost, "/v1/reservations/"+id+"/settle", key, map[string]any{"cost": 120}); r.status != http.StatusOK {
		t.Fatalf("settle beyond the limit: %d %s", r.status, r.raw)
	}
	if u := used(); u != 145 {
		t.Fatalf("used %v, want 145", u)
	}
	if _, r := reserve(1); r.status != http.StatusTooManyRequests {
		t.Fatalf("reserve over the limit: %d %s", r.status, r.raw)
	}
	if r := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"reserve": "yes"}); r.status != http.StatusBadRequest {
		t.Fatalf("reserve: \"yes\": %d %s", r.status, r.raw)
	}
	if r := in.call(t, http.MethodDelete, "/v1/reservations/nope", key, nil); r.status != http.StatusNotFound {
		t.Fatalf("malformed id: %d %s", r.status, r.raw)
	}
	if r := in.call(t, http.MethodDelete, "/v1/reservations/"+id, "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("no key: %d %s", r.status, r.raw)
	}
}

// TestReserveSettleConcurrentOverHTTP: concurrent reserve, settle and
// cancel through the API keep the figure exact.
func TestReserveSettleConcurrentOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	a := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	b := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := a.newPlan(t, nil, map[string]any{"tokens": map[string]any{"limit": 100000, "mode": "hard"}})
	_, key := a.newTenant(t, plan)
	var settled atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				in, other := a, b
				if (g+i)%2 == 1 {
					in, other = b, a
				}
				r := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 5, "meter": "tokens", "reserve": true})
				if r.status != http.StatusOK {
					t.Errorf("reserve: %d %s", r.status, r.raw)
					return
				}
				id := r.body["reservation"].(map[string]any)["id"].(string)
				if i%3 == 0 {
					if r := other.call(t, http.MethodDelete, "/v1/reservations/"+id, key, nil); r.status != http.StatusNoContent {
						t.Errorf("cancel: %d %s", r.status, r.raw)
					}
					continue
				}
				cost := int64((g + i) % 9)
				if r := other.call(t, http.MethodPost, "/v1/reservations/"+id+"/settle", key, map[string]any{"cost": cost}); r.status != http.StatusOK {
					t.Errorf("settle: %d %s", r.status, r.raw)
					continue
				}
				settled.Add(cost)
			}
		}()
	}
	wg.Wait()
	r := a.call(t, http.MethodGet, "/v1/usage", key, nil)
	for _, m := range r.body["meters"].([]any) {
		if mm := m.(map[string]any); mm["meter"] == "tokens" && mm["used"] != float64(settled.Load()) {
			t.Fatalf("used %v, settled %d", mm["used"], settled.Load())
		}
	}
}
