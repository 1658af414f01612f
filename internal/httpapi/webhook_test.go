package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/tollgatehq/tollgate/internal/billing"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/credentials"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/jobs"
	"github.com/tollgatehq/tollgate/internal/pgtest"
)

// The webhook's intake: verification, limits and dependencies. What the
// worker then does with events is tested in internal/billing.

const (
	whSecret     = "whsec_httpapi_current"
	whPrevSecret = "whsec_httpapi_previous"
	whAdminToken = "tga_webhook_test"
)

var whSeq atomic.Int64

func whEventID() string { return fmt.Sprintf("evt_wh_%d_%d", time.Now().UnixNano(), whSeq.Add(1)) }

// whServer is an api instance with billing wired on pool.
func whServer(t *testing.T, pool *pgxpool.Pool, o billing.Options) *httptest.Server {
	t.Helper()
	ents := entitlements.NewService(pool, nil, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	ins, err := jobs.NewInsertClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := billing.New(pool, ents, cat, ins, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Deps{DB: pool, AdminToken: whAdminToken, Entitlements: ents, Catalogue: cat, Credentials: credentials.New(pool, ents, nil, credentials.Options{}), Billing: b})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

// whEvent is a minimal well-formed event on stripe-go v79's API version.
func whEvent(id string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"livemode":false,"type":"product.updated","data":{"object":{"id":"prod_1","object":"product","name":"x"}}}`, id, time.Now().Unix()))
}

func whSign(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

type whResp struct {
	status int
	ctype  string
	body   map[string]any
	raw    string
}

func whPost(t *testing.T, url string, body []byte, sig string) whResp {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set("Stripe-Signature", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := whResp{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func whStored(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestWebhookRejectsBadSignaturesTimestampsAndBodies(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ts := whServer(t, pool, billing.Options{WebhookSecret: whSecret})
	now := time.Now()
	good := whEvent(whEventID())
	cases := []struct {
		name   string
		body   []byte
		sig    string
		detail string
	}{
		{"missing signature", good, "", "missing Stripe-Signature"},
		{"malformed header", good, "t=abc,v1=zz", "malformed Stripe-Signature"},
		{"no v1 in header", good, fmt.Sprintf("t=%d", now.Unix()), "no valid v1 signature"},
		{"wrong secret", good, whSign(good, "whsec_someone_else", now), "no valid v1 signature"},
		{"signature of another body", good, whSign(whEvent(whEventID()), whSecret, now), "no valid v1 signature"},
		{"stale timestamp", good, whSign(good, whSecret, now.Add(-6*time.Minute)), "old"},
		{"future timestamp", good, whSign(good, whSecret, now.Add(6*time.Minute)), "ahead"},
		{"malformed JSON", []byte(`{"id": "evt_1", `), whSign([]byte(`{"id": "evt_1", `), whSecret, now), "not a Stripe event"},
		{"JSON that is no event", []byte(`{"hello":"world"}`), whSign([]byte(`{"hello":"world"}`), whSecret, now), "not a Stripe event"},
		{"event without data.object", []byte(`{"id":"evt_x1","object":"event","type":"a.b","created":1700000000,"data":{}}`),
			whSign([]byte(`{"id":"evt_x1","object":"event","type":"a.b","created":1700000000,"data":{}}`), whSecret, now), "not a Stripe event"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := whPost(t, ts.URL, c.body, c.sig)
			if r.status != http.StatusBadRequest || r.ctype != "application/problem+json" {
				t.Fatalf("status %d (%s), want 400 problem: %s", r.status, r.ctype, r.raw)
			}
			if d, _ := r.body["detail"].(string); !strings.Contains(d, c.detail) {
				t.Fatalf("detail %q does not say %q", d, c.detail)
			}
		})
	}
	var n int
	_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events WHERE id = $1`, "evt_x1").Scan(&n)
	if n != 0 {
		t.Fatal("a rejected event was stored")
	}

	// A timestamp just inside the window either side is accepted.
	for _, at := range []time.Time{now.Add(-4 * time.Minute), now.Add(4 * time.Minute)} {
		id := whEventID()
		body := whEvent(id)
		if r := whPost(t, ts.URL, body, whSign(body, whSecret, at)); r.status != http.StatusOK {
			t.Fatalf("timestamp %s: %d %s", at.Sub(now), r.status, r.raw)
		}
	}
}

func TestWebhookAcceptsThePreviousSecretDuringRotation(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rotating := whServer(t, pool, billing.Options{WebhookSecret: whSecret, WebhookSecretPrevious: whPrevSecret})
	settled := whServer(t, pool, billing.Options{WebhookSecret: whSecret})

	id := whEventID()
	body := whEvent(id)
	old := whSign(body, whPrevSecret, time.Now())
	if r := whPost(t, settled.URL, body, old); r.status != http.StatusBadRequest {
		t.Fatalf("old secret without rotation: %d, want 400", r.status)
	}
	if r := whPost(t, rotating.URL, body, old); r.status != http.StatusOK || !whStored(t, pool, id) {
		t.Fatalf("old secret during rotation: %d %s", r.status, r.raw)
	}
	// Stripe signs with both secrets during a rotation: one header, two v1=.
	id2 := whEventID()
	body2 := whEvent(id2)
	at := time.Now()
	both := whSign(body2, whPrevSecret, at) + ",v1=" + strings.SplitN(whSign(body2, whSecret, at), "v1=", 2)[1]
	if r := whPost(t, settled.URL, body2, both); r.status != http.StatusOK || !whStored(t, pool, id2) {
		t.Fatalf("two signatures, one valid: %d %s", r.status, r.raw)
	}
}

func TestWebhookBodyOver512KiBIs413(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ts := whServer(t, pool, billing.Options{WebhookSecret: whSecret})
	id := whEventID()
	pad := strings.Repeat("x", 513<<10)
	body := []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"type":"product.updated","data":{"object":{"id":"prod_1","description":%q}}}`, id, time.Now().Unix(), pad))
	r := whPost(t, ts.URL, body, whSign(body, whSecret, time.Now()))
	if r.status != http.StatusRequestEntityTooLarge || r.ctype != "application/problem+json" {
		t.Fatalf("status %d (%s), want 413 problem: %.200s", r.status, r.ctype, r.raw)
	}
	if whStored(t, pool, id) {
		t.Fatal("an oversized event was stored")
	}
	// Just under the limit passes.
	id = whEventID()
	pad = strings.Repeat("x", 500<<10)
	body = []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"type":"product.updated","data":{"object":{"id":"prod_1","description":%q}}}`, id, time.Now().Unix(), pad))
	if r := whPost(t, ts.URL, body, whSign(body, whSecret, time.Now())); r.status != http.StatusOK {
		t.Fatalf("500 KiB event: %d %.300s", r.status, r.raw)
	}
}

func TestWebhookWithoutSecretIs503SayingSo(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ts := whServer(t, pool, billing.Options{})
	body := whEvent(whEventID())
	r := whPost(t, ts.URL, body, whSign(body, whSecret, time.Now()))
	if r.status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(r.body["detail"]), "STRIPE_WEBHOOK_SECRET") {
		t.Fatalf("status %d, want 503 naming STRIPE_WEBHOOK_SECRET: %s", r.status, r.raw)
	}
	// A server without billing at all says the same.
	ents := entitlements.NewService(pool, nil, nil, entitlements.Options{})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	srv, err := NewServer(Deps{DB: pool, AdminToken: whAdminToken, Entitlements: ents, Catalogue: cat, Credentials: credentials.New(pool, ents, nil, credentials.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	bare := httptest.NewServer(srv)
	defer bare.Close()
	if r := whPost(t, bare.URL, body, whSign(body, whSecret, time.Now())); r.status != http.StatusServiceUnavailable {
		t.Fatalf("no billing: %d %s", r.status, r.raw)
	}
}

// Postgres unreachable: 503 (Stripe retries), never 2xx for an unstored event.
func TestWebhookWithDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	dead, err := pgxpool.New(context.Background(), "postgres://postgres@"+addr+"/tollgate?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	ts := whServer(t, dead, billing.Options{WebhookSecret: whSecret})
	body := whEvent(whEventID())
	r := whPost(t, ts.URL, body, whSign(body, whSecret, time.Now()))
	if r.status != http.StatusServiceUnavailable || r.ctype != "application/problem+json" {
		t.Fatalf("status %d (%s), want 503 problem: %s", r.status, r.ctype, r.raw)
	}
}

func TestWebhookDuplicateIs2xxAndStoredOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ts := whServer(t, pool, billing.Options{WebhookSecret: whSecret})
	id := whEventID()
	body := whEvent(id)
	first := whPost(t, ts.URL, body, whSign(body, whSecret, time.Now()))
	again := whPost(t, ts.URL, body, whSign(body, whSecret, time.Now()))
	if first.status != http.StatusOK || again.status != http.StatusOK {
		t.Fatalf("statuses %d, %d", first.status, again.status)
	}
	if first.body["duplicate"] != false || again.body["duplicate"] != true {
		t.Fatalf("duplicate flags %v, %v", first.body["duplicate"], again.body["duplicate"])
	}
	var jobsN int
	_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE args->>'event_id' = $1`, id).Scan(&jobsN)
	if jobsN != 1 {
		t.Fatalf("%d jobs, want 1", jobsN)
	}
}
