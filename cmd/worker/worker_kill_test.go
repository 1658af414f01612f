package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/tollgatehq/tollgate/cmd/internal/wire"
	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/config"
	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/testkit"
)

// A worker SIGKILLed while it applies a Stripe event (blocked in its call
// to Stripe) leaves the event's job running in River's table. Another
// worker sees the dead one stop beating and runs the job again within
// WORKER_HEARTBEAT_TIMEOUT and a beat, not after River's rescue (about two
// minutes: RescueStuckJobsAfter plus up to 30 s of the rescuer's interval).
func TestKilledWorkersStripeEventRunsAgainWithinSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cmd/worker twice")
	}
	e := workerEnv(t)
	pool := pgtest.New(t)
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tag := hex.EncodeToString(suffix[:])
	subID, cusID, evtID := "sub_kill_"+tag, "cus_kill_"+tag, "evt_kill_"+tag

	// Stripe: the first read of the subscription never answers (the job
	// is then running when the worker dies); later ones say the
	// subscription is gone, so the event's own payload applies.
	var reads atomic.Int32
	blocked := make(chan struct{}, 1)
	stripe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/subscriptions/"+subID && reads.Add(1) == 1 {
			blocked <- struct{}{}
			select {
			case <-r.Context().Done(): // the worker died
			case <-time.After(2 * time.Minute):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such subscription"}}`)
	}))
	t.Cleanup(stripe.Close)

	// The event, stored with its job as the api's webhook stores it.
	const secret = "whsec_worker_kill_test"
	cfg, err := config.Load(testkit.Getenv(map[string]string{"DATABASE_URL": e["DATABASE_URL"], "STRIPE_WEBHOOK_SECRET": secret}))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ents := entitlements.NewService(pool, nil, log, entitlements.Options{DefaultPlan: "free"})
	cat := catalogue.NewService(pool, nil, catalogue.Options{Touch: ents.TouchCatalogue})
	bill, err := wire.Billing(pool, ents, cat, cfg, log, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../internal/billing/testdata/stripe/events/derived/customer.subscription.updated.plan-upgrade.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	ev["id"] = evtID
	obj := ev["data"].(map[string]any)["object"].(map[string]any)
	obj["id"], obj["customer"] = subID, cusID
	body, _ := json.Marshal(ev)
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: time.Now()}).Header
	if _, err := bill.Receive(t.Context(), body, sig); err != nil {
		t.Fatal(err)
	}

	bin := testkit.Binary(t, "github.com/tollgatehq/tollgate/cmd/worker")
	env := append(os.Environ(),
		"DATABASE_URL="+e["DATABASE_URL"], "REDIS_URL="+e["REDIS_URL"], "WORKER_METRICS_ADDR=off",
		"MIGRATE_ON_START=false", "STRIPE_SECRET_KEY=sk_test_worker_kill", "STRIPE_API_BASE="+stripe.URL,
		"WORKER_HEARTBEAT_TIMEOUT=3s")
	start := func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = env
		var logs testkit.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("worker %d logs:\n%s", cmd.Process.Pid, logs.String())
			}
		})
		return cmd
	}
	first := start()
	select {
	case <-blocked:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not start the event's job (no read of the subscription) within 60s")
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	start()

	status := func() string {
		var s string
		if err := pool.QueryRow(t.Context(), `SELECT status FROM stripe_events WHERE id = $1`, evtID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Three seconds without a beat, a beat, River's fetch: well under ten
	// seconds; the rest is for -race and two loaded cores.
	testkit.Eventually(t, 30*time.Second, "the killed worker's event applied by the other worker", func() bool {
		return status() != "pending"
	})
	took := time.Since(killed)
	t.Logf("event %s: %s %v after the SIGKILL (Stripe read %d times)", evtID, status(), took.Round(time.Millisecond), reads.Load())
	if took > 20*time.Second {
		t.Errorf("the event waited %v after its worker was killed, want seconds", took)
	}
	var errs []string
	if err := pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(x->>'error'), '{}') FROM river_job, unnest(errors) x
		WHERE kind = 'stripe_event' AND args->>'event_id' = $1`, evtID).Scan(&errs); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "stopped beating") {
		t.Errorf("job errors %q, want one saying its worker stopped beating", errs)
	}
}
