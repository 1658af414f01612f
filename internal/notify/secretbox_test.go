package notify

import (
	"context"
	"errors"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// Secrets are sealed at rest: the row holds neither the secret nor its key
// bytes, a failing and a working delivery (the log at debug level
// included) never log it, a rotation keeps both sealed, and a row written
// in clear before sealing is sealed by SealStored and still signs.
func TestSecretsSealedAtRestAndNeverLogged(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true, Backoff: shortBackoff[:1]})
	ctx := context.Background()
	bad := newReceiver(t, 500, 500)
	good := newReceiver(t)
	ep, err := b.svc.Create(ctx, EndpointInput{URL: bad.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rot, err := b.svc.RotateSecret(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	ep2, err := b.svc.Create(ctx, EndpointInput{URL: good.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	stored := func(id string) (string, string) {
		var sec, prev string
		if err := b.db.QueryRow(ctx, `SELECT secret, coalesce(prev_secret, '') FROM webhook_endpoints WHERE id = $1`, id).Scan(&sec, &prev); err != nil {
			t.Fatal(err)
		}
		return sec, prev
	}
	secrets := []string{ep.Secret, rot.Secret, ep2.Secret}
	for _, id := range []string{ep.ID, ep2.ID} {
		sec, prev := stored(id)
		for _, s := range secrets {
			if strings.Contains(sec+prev, s) || strings.Contains(sec+prev, strings.TrimPrefix(s, "whsec_")) {
				t.Fatalf("endpoint %s stores a secret in clear: %q %q", id, sec, prev)
			}
		}
		if !strings.HasPrefix(sec, sealedPrefix) {
			t.Errorf("stored secret %q, want sealed (%s…)", sec, sealedPrefix)
		}
	}
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	waitFor(t, "both deliveries done", func() bool {
		return b.delivery(t, ep.ID).Status == "failed" && b.delivery(t, ep2.ID).Status == "delivered"
	})
	wh, err := standardwebhooks.NewWebhook(ep2.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if g := good.requests()[0]; wh.Verify(g.body, g.header) != nil {
		t.Errorf("a sealed secret did not sign: %v", wh.Verify(g.body, g.header))
	}

	// A row from before sealing: stored in clear, sealed by SealStored.
	if _, err := b.db.Exec(ctx, `UPDATE webhook_endpoints SET secret = $2, prev_secret = NULL WHERE id = $1`, ep2.ID, ep2.Secret); err != nil {
		t.Fatal(err)
	}
	if n, err := b.svc.SealStored(ctx); err != nil || n != 1 {
		t.Fatalf("SealStored = %d, %v; want 1", n, err)
	}
	if sec, _ := stored(ep2.ID); !strings.HasPrefix(sec, sealedPrefix) {
		t.Errorf("after SealStored: %q", sec)
	}
	b.emit(t, Event{Type: TypeSubscriptionStatus, Data: map[string]any{}})
	waitFor(t, "the second delivery", func() bool { return len(good.requests()) == 2 })
	if g := good.requests()[1]; wh.Verify(g.body, g.header) != nil {
		t.Errorf("a resealed secret did not sign: %v", wh.Verify(g.body, g.header))
	}

	logs := b.log.String()
	if !strings.Contains(logs, "webhook delivery failed") {
		t.Fatalf("the capture missed the failure log:\n%s", logs)
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) || strings.Contains(logs, strings.TrimPrefix(s, "whsec_")) {
			t.Fatalf("a secret is in the log:\n%s", logs)
		}
	}
}

// Without WEBHOOK_SECRET_KEY an endpoint cannot be created (503 naming
// the variable); a key of the wrong size is refused at start.
func TestNoSecretKeyRefusesEndpoints(t *testing.T) {
	b := setup(t, Options{AllowHTTP: true, AllowPrivate: true})
	svc, err := NewService(b.db, nil, Options{AllowHTTP: true, AllowPrivate: true, Insert: b.svc.insert})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Create(context.Background(), EndpointInput{URL: "http://127.0.0.1:1/x"})
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Code != apperr.Unavailable || !strings.Contains(ae.Message, "WEBHOOK_SECRET_KEY") {
		t.Fatalf("create without a key: %v, want 503 naming WEBHOOK_SECRET_KEY", err)
	}
	if _, err := NewService(b.db, nil, Options{SecretKey: make([]byte, 16), Insert: b.svc.insert}); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
}
