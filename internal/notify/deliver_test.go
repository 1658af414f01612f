package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

var shortBackoff = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}

// A receiver answering 500 three times then 200 gets the same webhook-id
// four times, each signed so that the Standard Webhooks library (not our
// code) verifies it, and the delivery ends delivered.
func TestDeliveryRetriesWithTheSameIDUntilDelivered(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	r := newReceiver(t, 500, 500, 500)
	ep, err := b.svc.Create(context.Background(), EndpointInput{URL: r.srv.URL + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.Secret, "whsec_") || len(ep.Secret) != len("whsec_")+32 {
		t.Fatalf("secret %q, want whsec_ + base64 of 24 bytes", ep.Secret)
	}
	if n := b.emit(t, Event{Type: TypeQuotaThreshold, Data: map[string]any{"meter": "requests"}}); n != 1 {
		t.Fatalf("emitted %d, want 1", n)
	}
	waitFor(t, "delivered", func() bool { return b.delivery(t, ep.ID).Status == "delivered" })
	got := r.requests()
	if len(got) != 4 {
		t.Fatalf("%d requests, want 4", len(got))
	}
	wh, err := standardwebhooks.NewWebhook(ep.Secret)
	if err != nil {
		t.Fatal(err)
	}
	id := got[0].header.Get("webhook-id")
	for i, g := range got {
		if g.header.Get("webhook-id") != id || id == "" {
			t.Errorf("request %d: webhook-id %q, want %q on every attempt", i, g.header.Get("webhook-id"), id)
		}
		if err := wh.Verify(g.body, g.header); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	var ev struct {
		ID, Type  string
		Timestamp time.Time
		Data      map[string]any
	}
	if err := json.Unmarshal(got[3].body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.ID != id || ev.Type != TypeQuotaThreshold || ev.Data["meter"] != "requests" || ev.Timestamp.IsZero() {
		t.Errorf("body %s", got[3].body)
	}
	d := b.delivery(t, ep.ID)
	if d.Attempts != 4 || d.Code == nil || *d.Code != 200 {
		t.Errorf("delivery %+v, want 4 attempts ending 200", d)
	}
}

// After the last retry the delivery is failed, not retried forever; a
// redirect is not followed (it counts as a failure).
func TestDeliveryFailsAfterTheBackoffAndFollowsNoRedirect(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff[:2]})
	target := newReceiver(t)
	r := newReceiver(t)
	r.srv.Config.Handler = http.RedirectHandler(target.srv.URL, http.StatusTemporaryRedirect)
	ep, err := b.svc.Create(context.Background(), EndpointInput{URL: r.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	waitFor(t, "failed", func() bool { return b.delivery(t, ep.ID).Status == "failed" })
	d := b.delivery(t, ep.ID)
	if d.Attempts != 3 || d.Code == nil || *d.Code != http.StatusTemporaryRedirect {
		t.Errorf("delivery %+v, want 3 attempts answered 307", d)
	}
	if n := len(target.requests()); n != 0 {
		t.Errorf("the redirect's target got %d requests, want 0", n)
	}
}

// An endpoint whose host is (now) a private address is refused when the
// socket connects, whatever it resolved to at creation (DNS rebinding):
// the receiver never sees a request.
func TestDeliveryToAPrivateAddressIsRefusedAtSendTime(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, Backoff: shortBackoff[:1]})
	r := newReceiver(t)
	// As if the host had resolved to a public address at creation.
	var id string
	if err := b.db.QueryRow(context.Background(), `INSERT INTO webhook_endpoints (url, secret) VALUES ($1, $2) RETURNING id::text`,
		r.srv.URL, "whsec_"+strings.Repeat("A", 32)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	b.emit(t, Event{Type: TypeQuotaThreshold, Data: map[string]any{}})
	waitFor(t, "failed", func() bool { return b.delivery(t, id).Status == "failed" })
	d := b.delivery(t, id)
	if d.Error == nil || !strings.Contains(*d.Error, "private address") || d.Code != nil {
		t.Errorf("delivery %+v, want refused as a private address", d)
	}
	if n := len(r.requests()); n != 0 {
		t.Errorf("receiver got %d requests, want 0", n)
	}
}

// During a rotation both secrets sign: a receiver still on the old secret
// and one already on the new one both verify (with the library).
func TestRotatedSecretSignsBesideTheNewOne(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	r := newReceiver(t)
	ctx := context.Background()
	ep, err := b.svc.Create(ctx, EndpointInput{URL: r.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rot, err := b.svc.RotateSecret(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rot.Secret == ep.Secret || !strings.HasPrefix(rot.Secret, "whsec_") {
		t.Fatalf("rotated secret %q", rot.Secret)
	}
	b.emit(t, Event{Type: TypeQuotaThreshold, Data: map[string]any{}})
	waitFor(t, "delivered", func() bool { return len(r.requests()) == 1 })
	g := r.requests()[0]
	if n := len(strings.Fields(g.header.Get("webhook-signature"))); n != 2 {
		t.Errorf("webhook-signature %q: %d signatures, want 2", g.header.Get("webhook-signature"), n)
	}
	for _, sec := range []string{ep.Secret, rot.Secret} {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(g.body, g.header); err != nil {
			t.Errorf("secret %s…: %v", sec[:10], err)
		}
	}
	// Past the overlap only the new secret signs.
	b.svc.opts.Now = func() time.Time { return time.Now().Add(rotationOverlap + time.Minute) }
	b.emit(t, Event{Type: TypeQuotaThreshold, Data: map[string]any{}})
	waitFor(t, "second delivery", func() bool { return len(r.requests()) == 2 })
	g = r.requests()[1]
	if n := len(strings.Fields(g.header.Get("webhook-signature"))); n != 1 {
		t.Errorf("after the overlap: %d signatures, want 1", n)
	}
}

// An event with a dedupe key is written once, however often it is emitted;
// an endpoint only gets the types it asked for.
func TestEmitDedupesAndFiltersByType(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff})
	ctx := context.Background()
	all := newReceiver(t)
	some := newReceiver(t)
	if _, err := b.svc.Create(ctx, EndpointInput{URL: all.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Create(ctx, EndpointInput{URL: some.srv.URL, Events: []string{TypeSubscriptionStatus}}); err != nil {
		t.Fatal(err)
	}
	ev := Event{Type: TypeQuotaThreshold, Data: map[string]any{}, DedupeKey: "k1"}
	if n := b.emit(t, ev, ev); n != 1 {
		t.Errorf("emitted %d, want 1", n)
	}
	if n := b.emit(t, ev); n != 0 {
		t.Errorf("emitted again %d, want 0", n)
	}
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	waitFor(t, "deliveries", func() bool { return len(all.requests()) == 2 && len(some.requests()) == 1 })
	if len(some.requests()) != 1 || !strings.Contains(string(some.requests()[0].body), TypeSubscriptionStatus) {
		t.Errorf("filtered endpoint got %d requests", len(some.requests()))
	}
}
