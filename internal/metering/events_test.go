package metering

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/limiter"
)

func ev(id, meter string, q int64, at time.Time) Event {
	return Event{ID: id, Meter: meter, Quantity: q, Timestamp: at}
}

func fields(err error) map[string]string {
	out := map[string]string{}
	if e, ok := apperr.As(err); ok {
		for _, f := range e.Fields {
			out[f.Field] = f.Message
		}
	}
	return out
}

func TestIngestDuplicatesCountedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	now := time.Now()
	p := period0(t, b, tenant)

	// In-batch duplicate: "a" twice, counted once (first occurrence wins).
	res, err := b.svc.Ingest(b.ctx, tenant, []Event{ev("a", "exports", 2, now), ev("a", "exports", 5, now), ev("b", "exports", 3, now)})
	if err != nil {
		t.Fatal(err)
	}
	if res != (IngestResult{Accepted: 2, Duplicates: 1}) {
		t.Fatalf("first batch = %+v, want 2 accepted, 1 duplicate", res)
	}
	// Cross-batch duplicates: "a" and "b" again, "c" new.
	res, err = b.svc.Ingest(b.ctx, tenant, []Event{ev("b", "exports", 3, now), ev("c", "exports", 7, now), ev("a", "exports", 2, now)})
	if err != nil {
		t.Fatal(err)
	}
	if res != (IngestResult{Accepted: 1, Duplicates: 2}) {
		t.Fatalf("second batch = %+v, want 1 accepted, 2 duplicates", res)
	}
	if got := b.durable(t, tenant, "exports", p.Start); got != 12 {
		t.Fatalf("durable usage = %d, want 2+3+7 = 12", got)
	}
	if n := b.count(t, `SELECT count(*) FROM usage_events WHERE tenant_id = $1`, tenant); n != 3 {
		t.Fatalf("stored events = %d, want 3", n)
	}
	if n := b.count(t, `SELECT coalesce(sum(used), 0) FROM usage_hourly WHERE tenant_id = $1 AND meter = 'exports'`, tenant); n != 12 {
		t.Fatalf("hourly history sum = %d, want 12", n)
	}
	// The same id for another tenant is another event.
	other := b.newTenant(t, time.Now().Add(-24*time.Hour))
	if res, err := b.svc.Ingest(b.ctx, other, []Event{ev("a", "exports", 1, now)}); err != nil || res.Accepted != 1 {
		t.Fatalf("other tenant = %+v, %v; want accepted", res, err)
	}
}

func period0(t testing.TB, b *bundle, tenant string) (p struct{ Start, End time.Time }) {
	t.Helper()
	tp, err := loadTenantPeriods(b.ctx, b.db, tenant)
	if err != nil {
		t.Fatal(err)
	}
	cur := tp.at(time.Now())
	p.Start, p.End = cur.Start, cur.End
	return p
}

func TestIngestOneInvalidStoresNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	now := time.Now()
	cases := []struct {
		name  string
		bad   Event
		field string
	}{
		{"empty id", ev("", "exports", 1, now), "events[2].id"},
		{"long id", ev(strings.Repeat("x", 256), "exports", 1, now), "events[2].id"},
		{"bad meter", ev("z", "Exports!", 1, now), "events[2].meter"},
		{"negative", ev("z", "exports", -1, now), "events[2].quantity"},
		{"huge", ev("z", "exports", MaxQuantity+1, now), "events[2].quantity"},
		{"too old", ev("z", "exports", 1, now.Add(-36*24*time.Hour)), "events[2].timestamp"},
		{"future", ev("z", "exports", 1, now.Add(10*time.Minute)), "events[2].timestamp"},
		{"no timestamp", ev("z", "exports", 1, time.Time{}), "events[2].timestamp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			batch := []Event{ev("ok1", "exports", 1, now), ev("ok2", "exports", 1, now), c.bad}
			_, err := b.svc.Ingest(b.ctx, tenant, batch)
			if apperr.CodeOf(err) != apperr.Invalid {
				t.Fatalf("err = %v, want invalid", err)
			}
			if _, ok := fields(err)[c.field]; !ok || len(fields(err)) != 1 {
				t.Fatalf("fields = %v, want only %s", fields(err), c.field)
			}
		})
	}
	if n := b.count(t, `SELECT count(*) FROM usage_events WHERE tenant_id = $1`, tenant); n != 0 {
		t.Fatalf("stored events = %d, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM usage_periods WHERE tenant_id = $1`, tenant); n != 0 {
		t.Fatalf("usage periods = %d, want 0", n)
	}
}

func TestParseEventsNamesFieldsByIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC().Format(time.RFC3339)
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	good := raw(`{"id":"e1","meter":"exports","quantity":2,"timestamp":"` + now + `"}`)
	cases := []struct {
		name  string
		event string
		field string
	}{
		{"float quantity", `{"id":"e","meter":"m","quantity":1.5,"timestamp":"` + now + `"}`, "events[1].quantity"},
		{"string quantity", `{"id":"e","meter":"m","quantity":"1","timestamp":"` + now + `"}`, "events[1].quantity"},
		{"missing quantity", `{"id":"e","meter":"m","timestamp":"` + now + `"}`, "events[1].quantity"},
		{"numeric id", `{"id":5,"meter":"m","quantity":1,"timestamp":"` + now + `"}`, "events[1].id"},
		{"bad timestamp", `{"id":"e","meter":"m","quantity":1,"timestamp":"yesterday"}`, "events[1].timestamp"},
		{"unknown field", `{"id":"e","meter":"m","quantity":1,"timestamp":"` + now + `","x":1}`, "events[1].x"},
		{"not an object", `[1]`, "events[1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.svc.ParseEvents([]json.RawMessage{good, raw(c.event)})
			if _, ok := fields(err)[c.field]; !ok {
				t.Fatalf("fields = %v, want %s", fields(err), c.field)
			}
		})
	}
	evs, err := b.svc.ParseEvents([]json.RawMessage{good})
	if err != nil || len(evs) != 1 || evs[0].Quantity != 2 || evs[0].Meter != "exports" {
		t.Fatalf("ParseEvents(good) = %+v, %v", evs, err)
	}
}

func TestIngestBatchSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	now := time.Now()
	big := make([]Event, MaxBatch+1)
	for i := range big {
		big[i] = ev(fmt.Sprint(i), "exports", 1, now)
	}
	for _, batch := range [][]Event{nil, {}, big} {
		_, err := b.svc.Ingest(b.ctx, tenant, batch)
		if _, ok := fields(err)["events"]; !ok {
			t.Fatalf("batch of %d: err = %v, want one naming events", len(batch), err)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM usage_events WHERE tenant_id = $1`, tenant); n != 0 {
		t.Fatalf("stored events = %d, want 0", n)
	}
	res, err := b.svc.Ingest(b.ctx, tenant, big[:MaxBatch])
	if err != nil || res.Accepted != MaxBatch {
		t.Fatalf("batch of %d = %+v, %v", MaxBatch, res, err)
	}
}

// Eight writers send overlapping batches (every id is sent by two
// writers): the durable meter, the events and the Redis counter all end
// exact.
func TestIngestConcurrentWritersExact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenant := b.newTenant(t, time.Now().Add(-24*time.Hour))
	snap := b.putSnapshot(t, tenant, 1, map[string]limiter.Quota{"exports": {Limit: 1 << 40, Mode: "soft"}})
	// Create the Redis counter as the limiter would, so AddUsage applies.
	lim, err := limiter.New(b.rdb, limiter.Options{Prefix: b.prefix, UsageLoader: b.svc.LoadUsage,
		Timeout: 5 * time.Second}) // not a fail-mode test: no 50 ms fallbacks under load
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if d, err := lim.Allow(b.ctx, tenant, limiter.Request{Peek: true, Meter: "exports"}); err != nil || !d.Allowed {
		t.Fatalf("peek = %+v, %v", d, err)
	}
	const writers, batches, per = 8, 10, 50
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < batches; i++ {
				batch := make([]Event, per)
				for j := range batch {
					// writer w and w^1 share their ids; quantity depends on the id only
					id := fmt.Sprintf("w%d-b%d-e%d", w/2, i, j)
					batch[j] = ev(id, "exports", int64(j%7+1), now)
				}
				res, err := b.svc.Ingest(b.ctx, tenant, batch)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				accepted += res.Accepted
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var want int64
	for j := 0; j < per; j++ {
		want += int64(j%7 + 1)
	}
	want *= writers / 2 * batches
	if accepted != writers/2*batches*per {
		t.Fatalf("accepted = %d, want %d", accepted, writers/2*batches*per)
	}
	if got := b.durable(t, tenant, "exports", snap.PeriodStart); got != want {
		t.Fatalf("durable = %d, want %d", got, want)
	}
	if got, ok, err := b.store.Used(b.ctx, tenant, "exports", snap.PeriodStart); err != nil || !ok || got != want {
		t.Fatalf("redis = %d %v %v, want %d", got, ok, err, want)
	}
}
