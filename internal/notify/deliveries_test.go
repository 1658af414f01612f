package notify

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Retry now sends a delivery waiting on a long backoff at once (the
// waiting job is superseded), replay sends a delivered event again; both
// keep the webhook-id, and the list shows status, attempts, last code and
// the receiver's answer.
func TestRetryNowAndReplay(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: []time.Duration{time.Hour}})
	ctx := context.Background()
	r := newReceiver(t, 500)
	ep, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	waitFor(t, "the first attempt", func() bool { return b.delivery(t, ep.ID).Attempts == 1 })
	ds, err := b.svc.Deliveries(ctx, ep.ID, 0, 0)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries %+v %v", ds, err)
	}
	d := ds[0]
	if d.Status != "pending" || d.Attempts != 1 || d.LastCode == nil || *d.LastCode != 500 || d.LastBody == nil || *d.LastBody != "answer Internal Server Error" || d.EventType != TypeSubscriptionStatus {
		t.Fatalf("after a 500: %+v", d)
	}
	if _, err := b.svc.RetryNow(ctx, ep.ID, d.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delivered by retry now", func() bool { return b.delivery(t, ep.ID).Status == "delivered" })
	if _, err := b.svc.RetryNow(ctx, ep.ID, d.ID); !errors.Is(err, ErrAlreadyDelivered) {
		t.Fatalf("retry of a delivered one: %v", err)
	}
	if _, err := b.svc.Replay(ctx, ep.ID, d.EventID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replay", func() bool { return len(r.requests()) == 3 && b.delivery(t, ep.ID).Status == "delivered" })
	got := r.requests()
	for _, g := range got {
		if g.header.Get("webhook-id") != d.EventID {
			t.Errorf("webhook-id %q, want %q every time", g.header.Get("webhook-id"), d.EventID)
		}
	}
	if _, err := b.svc.Replay(ctx, ep.ID, "msg_nope"); !errors.Is(err, ErrDeliveryNotFound) {
		t.Errorf("replay of no event: %v", err)
	}
	if _, err := b.svc.RetryNow(ctx, ep.ID, d.ID+1000); !errors.Is(err, ErrDeliveryNotFound) {
		t.Errorf("retry of no delivery: %v", err)
	}
	if _, err := b.svc.Deliveries(ctx, ep.ID, MaxDeliveriesPage+1, 0); err == nil {
		t.Error("a page over the maximum was accepted")
	}
	// The superseded job (waiting its hour) never sends: only 3 requests.
	if n := len(r.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}
