package metering

import (
	"context"
	"errors"
	"fmt"
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

// flushSQL commits one claim: the batch id is inserted first and only a
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
    SELECT $2, $3, $4, $6, quantity FROM f
    ON CONFLICT (tenant_id, meter, period_start)
    DO UPDATE SET used = up.used + EXCLUDED.used, updated_at = now()
), hourly AS (
    INSERT INTO usage_hourly AS h (tenant_id, meter, hour, used)
    SELECT $2, $3, date_trunc('hour', $7::timestamptz), quantity FROM f
    ON CONFLICT (tenant_id, meter, hour) DO UPDATE SET used = h.used + EXCLUDED.used
)
SELECT count(*) FROM f`

// FlushOnce moves every pending limiter counter into Postgres, exactly
// once. It finds them through their dirty marks (no keyspace scan): ClaimPending (Redis moves the growth into a flushing record with a
// batch id, or returns the earlier unacknowledged record), then flushSQL,
// then AckPending. A crash before the commit leaves the record, which the
// next pass claims again under the same id; a crash after it leaves the
// record too, and the replay finds its id already inserted.
func (s *Service) FlushOnce(ctx context.Context) (FlushStats, error) {
	var st FlushStats
	periods := map[string]tenantPeriods{}
	var first error
	err := s.store.DirtyPending(ctx, func(k limitstore.PendingKey) error {
		// One counter that cannot be flushed (its claim stays for the next
		// pass) must not hold back the others.
		if err := s.flushOne(ctx, k, periods, &st); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if first == nil {
				first = fmt.Errorf("counter %s/%s/%d: %w", k.Tenant, k.Meter, k.PeriodStart.Unix(), err)
			}
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

func (s *Service) flushOne(ctx context.Context, k limitstore.PendingKey, periods map[string]tenantPeriods, st *FlushStats) error {
	c, ok, err := s.store.ClaimPending(ctx, k)
	if err != nil || !ok {
		return err
	}
	drop := func(reason string) error {
		// Usage of a tenant we do not have (deleted, or a key no tenant of
		// ours made) can never be committed; keeping the claim would retry
		// it every second forever.
		s.log.WarnContext(ctx, "dropping pending usage", "tenant_id", k.Tenant, "meter", k.Meter, "units", c.N, "reason", reason)
		st.Dropped++
		return s.store.AckPending(ctx, k, c.ID)
	}
	if !ids.IsUUID(k.Tenant) || !ValidMeter(k.Meter) {
		return drop("malformed tenant or meter")
	}
	tp, ok := periods[k.Tenant]
	if !ok {
		tp, err = loadTenantPeriods(ctx, s.db, k.Tenant)
		if err != nil {
			if apperr.CodeOf(err) == apperr.NotFound {
				return drop("unknown tenant")
			}
			return err
		}
		periods[k.Tenant] = tp
	}
	start := k.PeriodStart.UTC()
	var inserted int64
	err = s.db.QueryRow(ctx, flushSQL, c.ID, k.Tenant, k.Meter, start, c.N, tp.endOf(start), s.opts.Now()).Scan(&inserted)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" {
			return drop("unknown tenant")
		}
		return fmt.Errorf("committing batch: %w", err)
	}
	if err := s.store.AckPending(ctx, k, c.ID); err != nil {
		return err
	}
	st.Counters++
	if inserted == 1 {
		st.Units += c.N
	}
	return nil
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
