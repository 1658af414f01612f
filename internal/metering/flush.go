package metering

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/apperr"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/limitstore"
)

// FlushStats counts what one flush pass moved.
type FlushStats struct {
	Counters int   // counters whose claim was committed (or found committed)
	Units    int64 // units added to Postgres by this pass
	Dropped  int   // claims of unknown tenants, acknowledged and dropped
}

// flushSQL commits one claim (negative when reservations settled below
// their estimate gave units back; the hour's figure then never goes below
// zero, the period's cannot): the batch id is inserted first and only a
// new id adds to the durable meter and the hourly history, all in one
// statement (one implicit transaction). A claim replayed after a crash
// between commit and acknowledgement finds its id and adds nothing.
const flushSQL = `
WITH f AS (
    INSERT INTO usage_flushes (batch_id, tenant_id, meter, period_start, quantity)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING quantity
), per AS (
    INSERT INTO usage_periods AS up (tenant_id, meter, period_start, period_end, used)
    SELECT $2, $3, $4, $6, greatest(quantity, 0) FROM f
    ON CONFLICT (tenant_id, meter, period_start)
    DO UPDATE SET used = greatest(up.used + $5, 0), updated_at = now()
), hourly AS (
    INSERT INTO usage_hourly AS h (tenant_id, meter, hour, used)
    SELECT $2, $3, date_trunc('hour', $7::timestamptz), greatest(quantity, 0) FROM f
    ON CONFLICT (tenant_id, meter, hour) DO UPDATE SET used = greatest(h.used + $5, 0)
)
SELECT count(*) FROM f`

// flushBatch is how many counters one claim script and one acknowledgement
// script take; flushCommits is how many claims are committed to Postgres at
// once. A pass over a thousand active tenants is then a handful of Redis
// scripts and commits spread over several connections, well inside the
// flush interval.
const (
	flushBatch   = 200
	flushCommits = 8
)

// FlushOnce moves every pending limiter counter into Postgres, exactly
// once. It finds them through their dirty marks (no keyspace scan), then
// per batch: ClaimPendingBatch (Redis moves each counter's growth into a
// flushing record with a batch id, or returns the earlier unacknowledged
// record), flushSQL per claim, then AckPendingBatch for the committed ones.
// A crash before a commit leaves the record, which the next pass claims
// again under the same id; a crash after it leaves the record too, and the
// replay finds its id already inserted.
func (s *Service) FlushOnce(ctx context.Context) (FlushStats, error) {
	var st FlushStats
	var mu sync.Mutex // guards st, first and periods
	periods := map[string]tenantPeriods{}
	var first error
	fail := func(k limitstore.PendingKey, err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = fmt.Errorf("counter %s/%s/%d: %w", k.Tenant, k.Meter, k.PeriodStart.Unix(), err)
		}
	}
	err := s.store.DirtyPendingBatches(ctx, flushBatch, func(ks []limitstore.PendingKey) error {
		claims, err := s.store.ClaimPendingBatch(ctx, ks)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fail(ks[0], err) // the next pass claims them
			return nil
		}
		acks := make([]string, len(ks))
		sem := make(chan struct{}, flushCommits)
		var wg sync.WaitGroup
		for i, k := range ks {
			if claims[i].ID == "" {
				continue // nothing to flush
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				// One counter that cannot be flushed (its claim stays for
				// the next pass) must not hold back the others.
				ack, err := s.commitClaim(ctx, k, claims[i], periods, &st, &mu)
				if err != nil && ctx.Err() == nil {
					fail(k, err)
				}
				if ack {
					acks[i] = claims[i].ID
				}
			}()
		}
		wg.Wait()
		if err := s.store.AckPendingBatch(ctx, ks, acks); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fail(ks[0], err) // replayed next pass, found committed
		}
		return nil
	})
	if err == nil {
		err = first
	}
	if err != nil {
		return st, fmt.Errorf("metering: flush: %w", err)
	}
	return st, nil
}

// commitClaim commits one claim to Postgres (or drops it: unknown tenant)
// and says whether it may be acknowledged.
func (s *Service) commitClaim(ctx context.Context, k limitstore.PendingKey, c limitstore.Claim, periods map[string]tenantPeriods, st *FlushStats, mu *sync.Mutex) (bool, error) {
	drop := func(reason string) (bool, error) {
		// Usage of a tenant we do not have (deleted, or a key no tenant of
		// ours made) can never be committed; keeping the claim would retry
		// it every second forever.
		s.log.WarnContext(ctx, "dropping pending usage", "tenant_id", k.Tenant, "meter", k.Meter, "units", c.N, "reason", reason)
		mu.Lock()
		st.Dropped++
		mu.Unlock()
		return true, nil
	}
	if !ids.IsUUID(k.Tenant) || !ValidMeter(k.Meter) {
		return drop("malformed tenant or meter")
	}
	mu.Lock()
	tp, ok := periods[k.Tenant]
	mu.Unlock()
	if !ok {
		var err error
		tp, err = loadTenantPeriods(ctx, s.db, k.Tenant)
		if err != nil {
			if apperr.CodeOf(err) == apperr.NotFound {
				return drop("unknown tenant")
			}
			return false, err
		}
		mu.Lock()
		periods[k.Tenant] = tp
		mu.Unlock()
	}
	start := k.PeriodStart.UTC()
	var inserted int64
	err := s.db.QueryRow(ctx, flushSQL, c.ID, k.Tenant, k.Meter, start, c.N, tp.endOf(start), s.opts.Now()).Scan(&inserted)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" {
			return drop("unknown tenant")
		}
		return false, fmt.Errorf("committing batch: %w", err)
	}
	mu.Lock()
	st.Counters++
	if inserted == 1 {
		st.Units += c.N
	}
	mu.Unlock()
	return true, nil
}

// RunFlusher flushes every interval until ctx ends. Every worker runs it:
// claims make concurrent flushers safe (two flushers of one claim insert
// the same batch id, and one of them adds nothing), so no leader is needed
// and a restarted worker flushes at once, without waiting for a leader
// election as a River periodic job would.
func (s *Service) RunFlusher(ctx context.Context, interval time.Duration, rdb redis.UniversalClient) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	lastRefusals := time.Time{}
	// Counters from before the dirty marks (a Redis kept across an
	// upgrade) are found by one scan at start; every pass after reads the
	// marks only.
	if n, err := s.store.AdoptUnmarked(ctx); err != nil && ctx.Err() == nil {
		s.log.ErrorContext(ctx, "adopting unmarked counters failed", "err", err)
	} else if n > 0 {
		s.log.InfoContext(ctx, "adopted counters without a dirty mark", "counters", n)
	}
	for {
		st, err := s.FlushOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "flush failed", "err", err)
		}
		if s.opts.OnFlush != nil && ctx.Err() == nil {
			s.opts.OnFlush(st, err)
		}
		// Refusal counts are a chart, not money: every 10 intervals is plenty.
		if rdb != nil && time.Since(lastRefusals) >= 10*interval {
			lastRefusals = time.Now()
			if _, err := s.FlushRefusals(ctx, rdb); err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "refusals flush failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			// A last pass on the way out, so that a clean stop leaves
			// nothing for the next worker; a killed one leaves claims
			// that the next pass replays.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, err := s.FlushOnce(fctx); err != nil {
				s.log.ErrorContext(fctx, "final flush failed", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
