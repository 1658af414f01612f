package remote_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/remote"
)

// A backend outside Tollgate loads what Redis lost (a flush, a failover)
// from Tollgate's API with a service token, giving the Client's methods to
// the limiter:
//
//	l, err := limiter.New(rdb, limiter.Options{Loader: tg.Snapshot, UsageLoader: tg.Usage})
//
// Here an httptest server stands in for Tollgate; in production the URL and
// token come from the environment (TOLLGATE_URL, TOLLGATE_TOKEN).
func ExampleNew() {
	tollgate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tgs_example" || r.URL.Path != "/service/v1/tenants/umbrella/snapshot" {
			http.Error(w, `{"detail": "no such tenant"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"plan": "team", "version": 3, "rate": {"per_second": 100, "burst": 1000},
			"period_start": "2026-11-01T00:00:00Z", "period_end": "2026-12-01T00:00:00Z"}`)
	}))
	defer tollgate.Close()

	tg, err := remote.New(tollgate.URL, "tgs_example", remote.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, err := tg.Snapshot(context.Background(), "umbrella")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(snap.TenantID, snap.Plan, snap.Rate.Burst)
	_, err = tg.Snapshot(context.Background(), "hooli")
	fmt.Println(errors.Is(err, limiter.ErrUnknownTenant))
	// Output:
	// umbrella team 1000
	// true
}
