package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/pgtest"
	"github.com/tollgatehq/tollgate/internal/redistest"
)

func usageEvent(id, meter string, q any, at time.Time) map[string]any {
	return map[string]any{"id": id, "meter": meter, "quantity": q, "timestamp": at.UTC().Format(time.RFC3339)}
}

func errorFields(a answer) map[string]bool {
	out := map[string]bool{}
	errs, _ := a.body["errors"].([]any)
	for _, e := range errs {
		if m, ok := e.(map[string]any); ok {
			f, _ := m["field"].(string)
			out[f] = true
		}
	}
	return out
}

func meterOf(t *testing.T, a answer, name string) map[string]any {
	t.Helper()
	ms, _ := a.body["meters"].([]any)
	for _, m := range ms {
		if mm, ok := m.(map[string]any); ok && mm["meter"] == name {
			return mm
		}
	}
	return nil
}

func TestUsageEventsOverHTTP(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	in := newLimitInstance(t, pool, redisAddr(t, rdb), prefix, limitSetup{})
	plan := in.newPlan(t, nil, map[string]any{
		"requests": map[string]any{"limit": 3, "mode": "hard"},
		"exports":  map[string]any{"limit": 5, "mode": "soft"},
	})
	_, key := in.newTenant(t, plan)
	now := time.Now()
	post := func(body any) answer { return in.call(t, http.MethodPost, "/v1/usage/events", key, body) }

	// In-batch duplicate counted once.
	a := post(map[string]any{"events": []any{usageEvent("a", "exports", 4, now), usageEvent("a", "exports", 4, now), usageEvent("b", "exports", 3, now)}})
	if a.status != http.StatusOK || a.body["accepted"] != 2.0 || a.body["duplicates"] != 1.0 {
		t.Fatalf("first batch: %d %s", a.status, a.raw)
	}
	// Cross-batch duplicates counted once.
	a = post(map[string]any{"events": []any{usageEvent("b", "exports", 3, now), usageEvent("c", "exports", 1, now)}})
	if a.status != http.StatusOK || a.body["accepted"] != 1.0 || a.body["duplicates"] != 1.0 {
		t.Fatalf("second batch: %d %s", a.status, a.raw)
	}

	// Invalid batches: 400 naming the field, nothing stored.
	bad := []struct {
		name  string
		body  any
		field string
	}{
		{"float quantity", map[string]any{"events": []any{usageEvent("d", "exports", 1, now), usageEvent("e", "exports", 1.5, now)}}, "events[1].quantity"},
		{"negative", map[string]any{"events": []any{usageEvent("d", "exports", -1, now)}}, "events[0].quantity"},
		{"bad meter", map[string]any{"events": []any{usageEvent("d", "Exports", 1, now)}}, "events[0].meter"},
		{"future", map[string]any{"events": []any{usageEvent("d", "exports", 1, now.Add(time.Hour))}}, "events[0].timestamp"},
		{"no id", map[string]any{"events": []any{map[string]any{"meter": "exports", "quantity": 1, "timestamp": now.Format(time.RFC3339)}}}, "events[0].id"},
		{"empty", map[string]any{"events": []any{}}, "events"},
		{"missing", map[string]any{}, "events"},
		{"unknown field", map[string]any{"events": []any{usageEvent("d", "exports", 1, now)}, "extra": 1}, "extra"},
	}
	for _, c := range bad {
		a := post(c.body)
		if a.status != http.StatusBadRequest || !errorFields(a)[c.field] {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, a.status, a.raw, c.field)
		}
	}
	big := make([]any, 1001)
	for i := range big {
		big[i] = usageEvent(fmt.Sprint("big", i), "exports", 1, now)
	}
	if a := post(map[string]any{"events": big}); a.status != http.StatusBadRequest || !errorFields(a)["events"] {
		t.Fatalf("1001 events: %d %s", a.status, a.raw)
	}
	if a := post(`{"events": [`); a.status != http.StatusBadRequest {
		t.Fatalf("malformed JSON: %d %s", a.status, a.raw)
	}
	huge := `{"events": [` + strings.Repeat(" ", 1<<20) + `]}`
	if a := post(huge); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over 1 MiB: %d %s", a.status, a.raw)
	}
	if a := in.call(t, http.MethodPost, "/v1/usage/events", "", map[string]any{"events": []any{usageEvent("z", "exports", 1, now)}}); a.status != http.StatusUnauthorized {
		t.Fatalf("without a key: %d", a.status)
	}

	u := in.call(t, http.MethodGet, "/v1/usage", key, nil)
	if u.status != http.StatusOK {
		t.Fatalf("GET /v1/usage: %d %s", u.status, u.raw)
	}
	ex := meterOf(t, u, "exports")
	if ex == nil || ex["used"] != 8.0 || ex["limit"] != 5.0 || ex["remaining"] != 0.0 || ex["mode"] != "soft" || ex["overage"] != 3.0 {
		t.Fatalf("exports = %v, want used 8 of 5 soft, overage 3 (%s)", ex, u.raw)
	}
	p, _ := u.body["period"].(map[string]any)
	if p["start"] == nil || p["end"] == nil {
		t.Fatalf("period = %v", u.body["period"])
	}

	// A tenant out of its hard quota can still record and read usage.
	for i := 0; i < 4; i++ {
		in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1})
	}
	if a := in.call(t, http.MethodPost, "/v1/check", key, map[string]any{"cost": 1}); a.status != http.StatusTooManyRequests {
		t.Fatalf("check after the quota: %d %s", a.status, a.raw)
	}
	if a := post(map[string]any{"events": []any{usageEvent("late", "exports", 1, now)}}); a.status != http.StatusOK {
		t.Fatalf("usage events with the quota exhausted: %d %s", a.status, a.raw)
	}
	u = in.call(t, http.MethodGet, "/v1/usage", key, nil)
	rq := meterOf(t, u, "requests")
	if u.status != http.StatusOK || rq == nil || rq["used"] != 3.0 || rq["remaining"] != 0.0 || rq["mode"] != "hard" {
		t.Fatalf("usage with the quota exhausted: %d %v (%s)", u.status, rq, u.raw)
	}
}
