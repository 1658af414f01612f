package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

// TestCheckEnforcesPlanWindows: POST /v1/check enforces a plan's windows
// (created through the admin API), names each in RateLimit-Policy and
// RateLimit with its length, refuses past a window with a 429 whose
// Retry-After is that window's, and a cost above a window's whole limit
// with the 422.
func TestCheckEnforcesPlanWindows(t *testing.T) {
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := randName("pw")
	in.admin(t, http.MethodPost, "/admin/v1/plans", map[string]any{"key": plan, "name": plan,
		"rate":    map[string]any{"per_second": 1000, "burst": 1000},
		"quotas":  map[string]any{"requests": map[string]any{"limit": 100000, "mode": "hard"}},
		"windows": []any{map[string]any{"name": "hourly", "limit": 3, "length": "1h", "kind": "fixed"}, map[string]any{"name": "daily", "limit": 50, "length": "24h"}},
	}, http.StatusCreated)
	_, key := in.newTenant(t, plan)
	check := func(body map[string]any) answer { return in.call(t, http.MethodPost, "/v1/check", key, body) }

	a := check(map[string]any{"cost": 1})
	if a.status != http.StatusOK {
		t.Fatalf("first check: %d %s", a.status, a.raw)
	}
	pol, cur := a.header.Get("RateLimit-Policy"), a.header.Get("RateLimit")
	if !strings.Contains(pol, `"rate";q=1000;w=1, "hourly";q=3;w=3600, "daily";q=50;w=86400, "requests";q=100000`) {
		t.Fatalf("RateLimit-Policy = %q", pol)
	}
	if !strings.Contains(cur, `"hourly";r=2;t=`) || !strings.Contains(cur, `"daily";r=49;t=`) {
		t.Fatalf("RateLimit = %q", cur)
	}
	if a := check(map[string]any{"cost": 4}); a.status != http.StatusUnprocessableEntity || a.body["policy"] != "hourly" || a.body["limit"] != 3.0 {
		t.Fatalf("cost above the hourly window: %d %s", a.status, a.raw)
	}
	check(map[string]any{"cost": 2})
	a = check(map[string]any{"cost": 1})
	if a.status != http.StatusTooManyRequests || a.body["policy"] != "hourly" {
		t.Fatalf("past the hourly window: %d %s", a.status, a.raw)
	}
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3600 {
		t.Fatalf("Retry-After %q, want the rest of the hour", a.header.Get("Retry-After"))
	}
	if !strings.Contains(a.header.Get("RateLimit"), `"hourly";r=0;t=`+strconv.Itoa(ra)) {
		t.Fatalf("RateLimit = %q, want hourly's t = Retry-After %d", a.header.Get("RateLimit"), ra)
	}
}
