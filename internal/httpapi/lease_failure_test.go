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

// With Redis down, POST /v1/check {"concurrency": true} and DELETE
// /v1/leases/{id} answer by the fail mode within the limiter's timeout,
// never 500: open admits without a lease (no slot could be recorded),
// closed refuses with 503, local admits from the in-process slots without
// a lease id (the slot is given back at once: no later request could name
// it); a release cannot reach the leases, so it is a 503 with Retry-After
// in every mode. Once Redis is back (empty), the lost lease is 404 and
// leases are issued again.
func TestLeasesWithRedisDown(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	const timeout = 50 * time.Millisecond
	const slack = 500 * time.Millisecond
	for _, mode := range []limiter.FailMode{limiter.FailOpen, limiter.FailClosed, limiter.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			srv := redistest.StartServer(t)
			in := newLimitInstance(t, pool, srv.Addr, redistest.Prefix(), limitSetup{opts: limiter.Options{
				Timeout:  timeout,
				FailMode: limiter.FailModes{Rate: mode, Quota: mode, Concurrency: mode, Window: mode},
			}})
			plan := randName("p")
			in.admin(t, http.MethodPost, "/admin/v1/plans", map[string]any{"key": plan, "name": plan, "concurrency": 2,
				"rate": map[string]any{"per_second": 1000, "burst": 1000}}, http.StatusCreated)
			_, key := in.newTenant(t, plan)
			conc := map[string]any{"concurrency": true}
			held, _ := leaseOf(t, in.call(t, http.MethodPost, "/v1/check", key, conc))

			srv.Kill()
			timed := func(what string, a answer) answer {
				t.Helper()
				t.Logf("%s with Redis down (%s): %d in %v %s", what, mode, a.status, a.took, a.raw)
				if a.status >= 500 && a.status != http.StatusServiceUnavailable {
					t.Fatalf("%s: %d %s", what, a.status, a.raw)
				}
				if a.took > timeout+slack {
					t.Errorf("%s took %v, want under %v", what, a.took, timeout+slack)
				}
				if a.status == http.StatusServiceUnavailable && (a.header.Get("Retry-After") == "" || a.header.Get("Content-Type") != "application/problem+json") {
					t.Errorf("%s: 503 without Retry-After or problem+json: %v %s", what, a.header, a.raw)
				}
				return a
			}
			// More checks than the limit: in local mode each in-process
			// slot is given back at once, so none is held.
			for i := 0; i < 4; i++ {
				a := timed("check with concurrency", in.call(t, http.MethodPost, "/v1/check", key, conc))
				switch mode {
				case limiter.FailClosed:
					if a.status != http.StatusServiceUnavailable {
						t.Fatalf("closed: check %d answered %d %s, want 503", i+1, a.status, a.raw)
					}
				default:
					if a.status != http.StatusOK || a.body["lease"] != nil || a.body["allowed"] != true {
						t.Fatalf("%s: check %d answered %d %s, want 200 allowed without a lease", mode, i+1, a.status, a.raw)
					}
				}
			}
			a := timed("release", in.call(t, http.MethodDelete, "/v1/leases/"+held, key, nil))
			if a.status != http.StatusServiceUnavailable {
				t.Fatalf("release with Redis down: %d %s, want 503", a.status, a.raw)
			}

			srv.Restart(t)
			testkit.Eventually(t, 10*time.Second, "leases issued again once Redis is back", func() bool {
				a := in.call(t, http.MethodPost, "/v1/check", key, conc)
				l, _ := a.body["lease"].(map[string]any)
				return a.status == http.StatusOK && l != nil && l["id"] != ""
			})
			if a := in.call(t, http.MethodDelete, "/v1/leases/"+held, key, nil); a.status != http.StatusNotFound {
				t.Fatalf("the lease lost with Redis: %d %s, want 404", a.status, a.raw)
			}
		})
	}
}
