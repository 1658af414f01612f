package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

const stopTestWebhookSecret = "whsec_postgres_stop_test_secret"

// outcome is what the api answered one batch or delivery.
type outcome struct {
	status     int
	retryAfter string
	ctype      string
	body       string
}

// Postgres stopped (immediate shutdown, as `pg_ctl stop -m immediate`)
// under a running api while usage batches and signed webhook deliveries
// keep coming: each is answered 2xx or 503 with Retry-After and a problem
// body, never anything else; after Postgres is back every 503'd one is
// accepted when resent, and every event sent is stored exactly once (the
// meter's figure is the sum of the distinct events).
func TestPostgresStoppedDuringIngestAndWebhooks(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartServer(t)
	rs := redistest.StartServer(t)
	api := startLiveAPI(t, rs, map[string]string{
		"DATABASE_URL":          pg.URL("tollgate"),
		"MIGRATE_ON_START":      "true",
		"STRIPE_WEBHOOK_SECRET": stopTestWebhookSecret,
	})
	plan := "stop-" + strings.ToLower(randomToken()[4:16])
	api.must("POST", "/admin/v1/plans", api.admin, map[string]any{"key": plan, "name": plan,
		"quotas": map[string]any{"exports": map[string]any{"limit": 1000000, "mode": "soft"}}}, http.StatusCreated, nil)
	var tenant struct{ ID string }
	api.must("POST", "/admin/v1/tenants", api.admin, map[string]any{"name": "stop", "plan": plan}, http.StatusCreated, &tenant)
	var key struct{ ID, Key string }
	api.must("POST", "/admin/v1/tenants/"+tenant.ID+"/api-keys", api.admin, map[string]any{"name": "k"}, http.StatusCreated, &key)

	fixture, err := os.ReadFile("../../internal/billing/testdata/stripe/events/derived/customer.subscription.paused.json")
	if err != nil {
		t.Fatal(err)
	}
	var event map[string]any
	if err := json.Unmarshal(fixture, &event); err != nil {
		t.Fatal(err)
	}
	post := func(path string, body []byte, header map[string]string) outcome {
		req, err := http.NewRequest(http.MethodPost, api.base+path, bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return outcome{}
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := api.c.Do(req)
		if err != nil {
			t.Errorf("POST %s: %v", path, err)
			return outcome{}
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return outcome{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), ctype: resp.Header.Get("Content-Type"), body: string(raw)}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	batchBody := func(ids []string) []byte {
		var evs []any
		for _, id := range ids {
			evs = append(evs, map[string]any{"id": id, "meter": "exports", "quantity": 2, "timestamp": now})
		}
		b, _ := json.Marshal(map[string]any{"events": evs})
		return b
	}
	ingest := func(ids []string) outcome {
		return post("/v1/usage/events", batchBody(ids), map[string]string{"Authorization": "Bearer " + key.Key})
	}
	deliver := func(id string) outcome {
		event["id"] = id
		body, _ := json.Marshal(event)
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stopTestWebhookSecret, Timestamp: time.Now()}).Header
		return post("/webhooks/stripe", body, map[string]string{"Stripe-Signature": sig})
	}
	// good says whether o is one of the two answers allowed: 2xx, or 503
	// with Retry-After and a problem body.
	good := func(what string, o outcome) bool {
		switch {
		case o.status >= 200 && o.status < 300:
			return true
		case o.status == http.StatusServiceUnavailable && o.retryAfter != "" && o.ctype == "application/problem+json" && strings.Contains(o.body, `"status":503`):
			return false
		}
		t.Errorf("%s: %d (Retry-After %q, %s) %s, want 2xx or 503 with Retry-After and a problem body", what, o.status, o.retryAfter, o.ctype, o.body)
		return false
	}

	var (
		mu               sync.Mutex
		batches          [][]string // every batch sent
		refusedBatches   [][]string
		events           []string // every webhook event id sent
		refusedEvents    []string
		okIngest, okHook int
		n503Ingest       int
		n503Hook         int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ids := []string{fmt.Sprintf("b%d-1", i), fmt.Sprintf("b%d-2", i), fmt.Sprintf("b%d-3", i)}
			okB := good("usage batch "+ids[0], ingest(ids))
			evt := fmt.Sprintf("evt_stop_%s_%d", tenant.ID[:8], i)
			okE := good("webhook "+evt, deliver(evt))
			mu.Lock()
			batches, events = append(batches, ids), append(events, evt)
			if okB {
				okIngest++
			} else {
				refusedBatches, n503Ingest = append(refusedBatches, ids), n503Ingest+1
			}
			if okE {
				okHook++
			} else {
				refusedEvents, n503Hook = append(refusedEvents, evt), n503Hook+1
			}
			mu.Unlock()
		}
	}()
	counts := func() (int, int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		return okIngest, okHook, n503Ingest, n503Hook
	}
	testkit.Eventually(t, 30*time.Second, "batches and deliveries accepted before the stop", func() bool {
		a, b, _, _ := counts()
		return a >= 3 && b >= 3
	})
	pg.Stop(t)
	testkit.Eventually(t, 30*time.Second, "503s for batches and deliveries while Postgres is stopped", func() bool {
		_, _, c, d := counts()
		return c >= 3 && d >= 3
	})
	pg.Start(t)
	a0, b0, _, _ := counts()
	testkit.Eventually(t, 60*time.Second, "batches and deliveries accepted again once Postgres is back", func() bool {
		a, b, _, _ := counts()
		return a >= a0+3 && b >= b0+3
	})
	close(stop)
	<-done
	a, b, c, d := counts()
	t.Logf("usage batches: %d accepted, %d answered 503; webhook deliveries: %d accepted, %d answered 503", a, c, b, d)

	// Resent, every refused one is accepted: new, or a duplicate when the
	// 503 came after Postgres had committed it.
	for _, ids := range refusedBatches {
		o := ingest(ids)
		var res struct{ Accepted, Duplicates int }
		if o.status != http.StatusOK || json.Unmarshal([]byte(o.body), &res) != nil || res.Accepted+res.Duplicates != len(ids) {
			t.Errorf("resent batch %v: %d %s", ids, o.status, o.body)
		}
	}
	for _, id := range refusedEvents {
		if o := deliver(id); o.status < 200 || o.status > 299 {
			t.Errorf("resent webhook %s: %d %s", id, o.status, o.body)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL("tollgate"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var all []string
	for _, ids := range batches {
		all = append(all, ids...)
	}
	var rows, distinct int
	var used int64
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT idempotency_key) FROM usage_events WHERE tenant_id = $1 AND idempotency_key = ANY($2)`,
		tenant.ID, all).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(used), 0) FROM usage_periods WHERE tenant_id = $1 AND meter = 'exports'`, tenant.ID).Scan(&used); err != nil {
		t.Fatal(err)
	}
	if rows != len(all) || distinct != len(all) || used != int64(2*len(all)) {
		t.Errorf("usage events: %d rows (%d distinct) for %d sent, exports used %d, want %d, each once", rows, distinct, len(all), used, 2*len(all))
	}
	var stored int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM stripe_events WHERE id = ANY($1)`, events).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != len(events) {
		t.Errorf("stripe events: %d stored of %d delivered", stored, len(events))
	}
}
