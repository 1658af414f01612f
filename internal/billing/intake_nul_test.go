package billing_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/billing"
)

// Postgres's jsonb cannot hold NUL; an event with a \u0000 in a string must
// still be stored (with U+FFFD) and answered 2xx, not 503 on every retry.
func TestEventWithNULCharacterIsStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	e.plans()
	cus := newCustomer()
	e.tenant("free", cus)
	id := newEventID(t)
	body := fixture(t, "derived/customer.subscription.updated.plan-upgrade.json", id, time.Now(), func(o map[string]any) {
		o["customer"] = cus
		o["metadata"] = map[string]any{"note": "before\x00after"}
	})
	if !strings.Contains(string(body), `\u0000`) {
		t.Fatalf("fixture does not carry the escape: %s", body)
	}
	if r := e.post(body); r.Status != http.StatusOK && r.Status != http.StatusAccepted {
		t.Fatalf("webhook with NUL: %d %s", r.Status, r.Raw)
	}
	if ev := e.waitEvent(id); ev.Status == billing.StatusPending {
		t.Fatalf("event not processed: %+v", ev)
	}
}
