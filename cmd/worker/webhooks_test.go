package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/tollgatehq/tollgate/internal/notify"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// The worker works webhook deliveries with the WEBHOOK_* settings: an
// event emitted by another process (here the test) reaches a receiver on
// loopback (WEBHOOK_ALLOW_PRIVATE), retried on WEBHOOK_RETRY_BACKOFF
// after a 503, and verifies with the Standard Webhooks library.
func TestRunDeliversWebhooks(t *testing.T) {
	e := workerEnv(t)
	e["WEBHOOK_ALLOW_PRIVATE"], e["WEBHOOK_ALLOW_HTTP"], e["WEBHOOK_RETRY_BACKOFF"] = "true", "true", "10ms"
	key := bytes.Repeat([]byte{9}, 32)
	e["WEBHOOK_SECRET_KEY"] = base64.StdEncoding.EncodeToString(key)
	var calls atomic.Int32
	verified := make(chan error, 4)
	var secret atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		wh, err := standardwebhooks.NewWebhook(secret.Load().(string))
		if err == nil {
			err = wh.Verify(b, r.Header)
		}
		verified <- err
	}))
	defer srv.Close()

	pool := pgtest.New(t)
	ctx := context.Background()
	svc, err := notify.NewService(pool, slog.New(slog.DiscardHandler), notify.Options{AllowHTTP: true, AllowPrivate: true, SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := svc.Create(ctx, notify.EndpointInput{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Delete(context.Background(), ep.ID) })
	secret.Store(ep.Secret)

	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	exited := make(chan int, 1)
	go func() { exited <- run(wctx, nil, testkit.Getenv(e), &stdout, &stderr) }()
	waitForLog(t, stderr.String, "worker started", exited)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := svc.Emit(ctx, tx, notify.Event{Type: notify.TypeSubscriptionStatus, Data: map[string]any{"status": "active"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-verified:
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no verified delivery within 30s (%d calls); logs:\n%s", calls.Load(), stderr.String())
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2 (a 503, then the retry)", n)
	}
	cancel()
	<-exited
}
