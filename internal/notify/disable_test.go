package notify

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock tests move while the worker reads it.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// An endpoint failing for 5 days straight is disabled and says why; 4 days
// of failures are not enough; enabling it again starts the streak over,
// and a delivered attempt ends it.
func TestEndpointFailingFiveDaysIsDisabled(t *testing.T) {
	clock := &testClock{}
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff[:1], Now: clock.Now})
	ctx := context.Background()
	r := newReceiver(t, 500, 500, 500, 500, 500, 500) // three deliveries of two attempts, then 200s
	ep, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	get := func() Endpoint {
		t.Helper()
		e, err := b.svc.Get(ctx, ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	failedOnce := func(n int) {
		t.Helper()
		b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
		waitFor(t, "the delivery failed", func() bool {
			var failed int
			_ = b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'`, ep.ID).Scan(&failed)
			return failed == n
		})
	}
	failedOnce(1)
	e := get()
	if e.FailingSince == nil || !e.Enabled || e.DisabledAt != nil {
		t.Fatalf("after a failure: %+v, want failing_since set and still enabled", e)
	}
	clock.Advance(4 * 24 * time.Hour)
	failedOnce(2)
	if e := get(); !e.Enabled || e.DisabledAt != nil {
		t.Fatalf("after 4 days of failures: %+v, want still enabled", e)
	}
	clock.Advance(24*time.Hour + time.Minute)
	failedOnce(3)
	e = get()
	if e.Enabled || e.DisabledAt == nil || e.DisabledReason == nil || !strings.Contains(*e.DisabledReason, "5 days") ||
		!strings.Contains(*e.DisabledReason, "500") {
		t.Fatalf("after 5 days of failures: %+v, want disabled with the reason", e)
	}
	if d := e.DisabledAt.Sub(clock.Now()); d > time.Minute || d < -time.Minute {
		t.Errorf("disabled_at %s, want the test clock's now %s", e.DisabledAt, clock.Now())
	}
	// Disabled: a new event gets no delivery.
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	var n int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d deliveries (%v), want 3: none for a disabled endpoint", n, err)
	}
	on := true
	if e, err := b.svc.Patch(ctx, ep.ID, EndpointPatch{Enabled: &on}); err != nil || !e.Enabled || e.DisabledAt != nil || e.DisabledReason != nil || e.FailingSince != nil {
		t.Fatalf("enabled again: %+v %v", e, err)
	}
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	waitFor(t, "a delivered attempt", func() bool { return len(r.requests()) == 7 })
	waitFor(t, "the streak ended", func() bool { e := get(); return e.FailingSince == nil && e.Enabled })
}
