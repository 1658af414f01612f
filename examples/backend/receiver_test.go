package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The receiver answers 204 to a delivery signed with the endpoint's secret
// (signed here by the Standard Webhooks library, as Tollgate's signatures are
// checked against it in internal/notify) and logs it; a tampered body, a
// stale timestamp or another secret is 400, so Tollgate retries it.
func TestReceiverVerifiesAndLogsEvents(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var logs bytes.Buffer
	h, err := receiver(secret, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_1","type":"quota.threshold","timestamp":"2026-12-02T10:00:00Z","data":{"meter":"requests","threshold":{"percent":80}}}`)
	post := func(secret string, ts time.Time, body []byte) int {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign("msg_1", ts, body)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/webhooks/tollgate", bytes.NewReader(body))
		req.Header.Set("webhook-id", "msg_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := post(secret, time.Now(), body); got != http.StatusNoContent {
		t.Fatalf("signed delivery = %d, want 204", got)
	}
	if !strings.Contains(logs.String(), `"type":"quota.threshold"`) || !strings.Contains(logs.String(), `"webhook_id":"msg_1"`) {
		t.Fatalf("the event was not logged: %s", logs.String())
	}
	other := "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB"
	if got := post(other, time.Now(), body); got != http.StatusBadRequest {
		t.Fatalf("delivery signed with another secret = %d, want 400", got)
	}
	if got := post(secret, time.Now().Add(-time.Hour), body); got != http.StatusBadRequest {
		t.Fatalf("delivery an hour old = %d, want 400 (replay)", got)
	}
	// Signed, then changed on the way.
	wh, _ := standardwebhooks.NewWebhook(secret)
	now := time.Now()
	sig, _ := wh.Sign("msg_2", now, body)
	req := httptest.NewRequest(http.MethodPost, "/webhooks/tollgate", bytes.NewReader(bytes.Replace(body, []byte("80"), []byte("99"), 1)))
	req.Header.Set("webhook-id", "msg_2")
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("tampered delivery = %d, want 400", rec.Code)
	}
	if _, err := receiver("not-a-secret!", slog.Default()); err == nil {
		t.Fatal("a malformed secret was accepted")
	}
}
