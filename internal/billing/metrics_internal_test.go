package billing

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgatehq/tollgate/internal/pgtest"
)

// Scrapes do not query Postgres each time: 100 scrapes read the backlog
// once (the first), and the counters exist at 0 before any event.
func TestBacklogMetricsReadPostgresAtMostOncePerInterval(t *testing.T) {
	pool := pgtest.New(t)
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	bc := newBacklogCollector(&Service{db: pool, log: slog.New(slog.DiscardHandler), opts: Options{Now: time.Now}})
	reg.MustRegister(bc)
	var names map[string]bool
	for i := 0; i < 100; i++ {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		names = map[string]bool{}
		for _, mf := range mfs {
			names[mf.GetName()] = true
		}
	}
	for _, n := range []string{"tollgate_stripe_events", "tollgate_stripe_oldest_pending_event_age_seconds",
		"tollgate_stripe_webhook_events_total", "tollgate_stripe_events_processed_total", "tollgate_stripe_event_failures_total",
		"tollgate_stripe_drift_repairs_total"} {
		if !names[n] {
			t.Errorf("%s missing from a fresh registry", n)
		}
	}
	if got := bc.readCount.Load(); got != 1 {
		t.Fatalf("100 scrapes read the backlog %d times, want 1", got)
	}
}
