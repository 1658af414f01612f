package metering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
)

// Batch bounds of POST /v1/usage/events.
const (
	MaxBatch    = 1000
	MaxIDLength = 255
	// MaxQuantity bounds one event so that sums of a batch (and of a
	// period) cannot overflow a bigint.
	MaxQuantity = 1_000_000_000_000
)

var meterRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// ValidMeter reports whether s is a meter name ([a-z0-9_.-]{1,64}).
func ValidMeter(s string) bool { return meterRE.MatchString(s) }

// Event is one usage event of a backend. ID is its idempotency key: an id
// seen before for the tenant is counted once, forever.
type Event struct {
	ID        string    `json:"id"`
	Meter     string    `json:"meter"`
	Quantity  int64     `json:"quantity"`
	Timestamp time.Time `json:"timestamp"`
}

// IngestResult is the answer to a batch.
type IngestResult struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// ParseEvents decodes the raw JSON objects of a batch, naming every bad
// field by index (events[3].quantity), and validates them as Ingest does.
// One bad event fails the whole batch.
func (s *Service) ParseEvents(raws []json.RawMessage) ([]Event, error) {
	var v apperr.Validation
	if err := checkBatchSize(len(raws), raws == nil); err != nil {
		return nil, err
	}
	evs := make([]Event, len(raws))
	for i, raw := range raws {
		f := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
		var obj map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&obj); err != nil || obj == nil {
			v.Add(fmt.Sprintf("events[%d]", i), "must be an object with id, meter, quantity and timestamp")
			continue
		}
		for k := range obj {
			switch k {
			case "id", "meter", "quantity", "timestamp":
			default:
				v.Add(f(k), "unknown field")
			}
		}
		str := func(name string) (string, bool) {
			r, ok := obj[name]
			if !ok || string(r) == "null" {
				v.Add(f(name), "is required")
				return "", false
			}
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				v.Add(f(name), "must be a string")
				return "", false
			}
			return s, true
		}
		e := &evs[i]
		e.ID, _ = str("id")
		e.Meter, _ = str("meter")
		if ts, ok := str("timestamp"); ok {
			t, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				v.Add(f("timestamp"), "must be an RFC 3339 timestamp such as 2026-11-30T10:00:00Z")
			} else {
				e.Timestamp = t
			}
		}
		if r, ok := obj["quantity"]; !ok || string(r) == "null" {
			v.Add(f("quantity"), "is required")
		} else if n, err := strconv.ParseInt(string(r), 10, 64); err != nil {
			v.Add(f("quantity"), "must be an integer between 0 and %d", int64(MaxQuantity))
		} else {
			e.Quantity = n
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := s.validate(evs); err != nil {
		return nil, err
	}
	return evs, nil
}

func checkBatchSize(n int, missing bool) error {
	switch {
	case missing:
		return apperr.Invalidf("events", "is required: a list of 1 to %d events", MaxBatch)
	case n == 0:
		return apperr.Invalidf("events", "must hold at least 1 event")
	case n > MaxBatch:
		return apperr.Invalidf("events", "holds %d events; at most %d per batch", n, MaxBatch)
	}
	return nil
}

// validate checks the values of a batch; every bad field is named.
func (s *Service) validate(evs []Event) error {
	if err := checkBatchSize(len(evs), evs == nil); err != nil {
		return err
	}
	now := s.opts.Now()
	oldest, newest := now.Add(-s.opts.MaxEventAge), now.Add(s.opts.MaxEventAhead)
	var v apperr.Validation
	for i, e := range evs {
		f := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
		if n := len(e.ID); n < 1 || n > MaxIDLength {
			v.Add(f("id"), "must be 1 to %d characters", MaxIDLength)
		}
		if !ValidMeter(e.Meter) {
			v.Add(f("meter"), "must match [a-z0-9_.-]{1,64}")
		}
		if e.Quantity < 0 || e.Quantity > MaxQuantity {
			v.Add(f("quantity"), "must be an integer between 0 and %d", int64(MaxQuantity))
		}
		switch {
		case e.Timestamp.IsZero():
			v.Add(f("timestamp"), "is required")
		case e.Timestamp.Before(oldest):
			v.Add(f("timestamp"), "is more than %s in the past", s.opts.MaxEventAge)
		case e.Timestamp.After(newest):
			v.Add(f("timestamp"), "is more than %s in the future", s.opts.MaxEventAhead)
		}
	}
	return v.Err()
}

// ingestSQL inserts a batch and adds it to the durable meters in ONE
// statement (so one round trip and one implicit transaction): the events
// that were new (RETURNING) are the only ones summed into usage_periods and
// usage_hourly (each in the event's own period: the hour a period starts
// in has a row per period). In-batch duplicates are cut by DISTINCT ON (first wins);
// rows are taken in key order so that concurrent batches lock in the same
// order and cannot deadlock.
const ingestSQL = `
WITH input AS (
    SELECT DISTINCT ON (k) k, m, q, o, ps, pe
    FROM unnest($2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[])
         WITH ORDINALITY AS u(k, m, q, o, ps, pe, i)
    ORDER BY k, i
), ins AS (
    INSERT INTO usage_events (tenant_id, idempotency_key, meter, quantity, occurred_at, period_start)
    SELECT $1, k, m, q, o, ps FROM input ORDER BY k
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING idempotency_key
), fresh AS (
    SELECT x.* FROM ins JOIN input x ON x.k = ins.idempotency_key
), per AS (
    INSERT INTO usage_periods AS up (tenant_id, meter, period_start, period_end, used)
    SELECT $1, m, ps, max(pe), sum(q) FROM fresh GROUP BY m, ps ORDER BY m, ps
    ON CONFLICT (tenant_id, meter, period_start)
    DO UPDATE SET used = up.used + EXCLUDED.used, updated_at = now()
), hourly AS (
    INSERT INTO usage_hourly AS h (tenant_id, period_start, meter, hour, used)
    SELECT $1, ps, m, date_trunc('hour', o), sum(q) FROM fresh GROUP BY 2, 3, 4 ORDER BY 2, 3, 4
    ON CONFLICT (tenant_id, period_start, meter, hour) DO UPDATE SET used = h.used + EXCLUDED.used
)
SELECT m, ps, sum(q)::bigint, count(*) FROM fresh GROUP BY m, ps`

// Ingest records a validated batch of the tenant's usage events: new ids
// are stored and added to their period's durable meter in one statement,
// ids seen before (in this batch or any earlier one) are counted as
// duplicates and nowhere else. After the commit the limiter's Redis
// counters of the touched periods grow too (only those that exist: a
// missing counter is rebuilt from Postgres, which already has these).
func (s *Service) Ingest(ctx context.Context, tenantID string, evs []Event) (IngestResult, error) {
	if err := s.validate(evs); err != nil {
		return IngestResult{}, err
	}
	if !ids.IsUUID(tenantID) {
		return IngestResult{}, apperr.New(apperr.NotFound, "tenant %s not found", tenantID)
	}
	tp, err := loadTenantPeriods(ctx, s.db, tenantID)
	if err != nil {
		return IngestResult{}, err
	}
	n := len(evs)
	keys, meters := make([]string, n), make([]string, n)
	qty := make([]int64, n)
	at, starts, ends := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	for i, e := range evs {
		p := tp.at(e.Timestamp)
		keys[i], meters[i], qty[i] = e.ID, e.Meter, e.Quantity
		at[i], starts[i], ends[i] = e.Timestamp.UTC(), p.Start, p.End
	}
	rows, err := s.db.Query(ctx, ingestSQL, tenantID, keys, meters, qty, at, starts, ends)
	if err != nil {
		return IngestResult{}, ingestErr(err)
	}
	type added struct {
		meter string
		start time.Time
		n     int64
	}
	var adds []added
	res := IngestResult{}
	for rows.Next() {
		var a added
		var count int
		if err := rows.Scan(&a.meter, &a.start, &a.n, &count); err != nil {
			rows.Close()
			return IngestResult{}, fmt.Errorf("metering: ingest: %w", err)
		}
		res.Accepted += count
		adds = append(adds, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return IngestResult{}, ingestErr(err)
	}
	res.Duplicates = n - res.Accepted
	// Committed: Postgres is the truth now. A failed Redis update is only
	// logged, because the counter is then at most behind by this batch and
	// GET /v1/usage shows max(Redis, Postgres).
	// One deadline for all of them (once it has passed the rest fail at
	// once): the batch is stored, so a Redis that does not answer must not
	// hold the answer, which a client that times out would resend.
	rctx, cancel := context.WithTimeout(ctx, s.opts.RedisTimeout)
	defer cancel()
	for _, a := range adds {
		if err := s.store.AddUsage(rctx, tenantID, a.meter, a.start, a.n); err != nil {
			s.log.WarnContext(ctx, "adding usage to redis failed", "tenant_id", tenantID, "meter", a.meter, "err", err)
		}
	}
	return res, nil
}

func ingestErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return apperr.New(apperr.NotFound, "tenant not found")
	}
	return fmt.Errorf("metering: ingest: %w", err)
}
