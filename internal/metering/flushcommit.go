package metering

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgatehq/tollgate/internal/entitlements"
	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/internal/postgres"
)

// FlushClaim is one counter's growth claimed in Redis for a flush: all the
// commit step needs, whatever Redis layout the claim was read from.
type FlushClaim struct {
	ID          string // the claim's id, usage_flushes.batch_id: a replay adds nothing
	Tenant      string
	Meter       string
	PeriodStart time.Time
	// N is the units to add, negative when reservations settled below
	// their estimate gave units back.
	N int64
}

// Commit outcomes of one claim: only a failed claim must stay in Redis.
type commitOutcome uint8

const (
	commitFailed    commitOutcome = iota // not committed: keep the claim for the next pass
	commitCommitted                      // in Postgres now, or found there (a replay)
	commitDropped                        // can never be committed (unknown tenant): drop it
)

// flushRowsSQL commits many claims in one statement, so one round trip
// and one implicit transaction. Only claims whose id is new in
// usage_flushes add to the durable meter and the hourly history, summed
// per row they touch (two claims of one counter in a batch would
// otherwise update one row twice, which Postgres refuses). Rows are
// inserted in key order so that concurrent flushers lock them in the
// same order and cannot deadlock.
//
// The hourly row is the flush's hour in the claim's own period: usage of
// the previous period flushed after the new one began stays the previous
// period's. A clock a little behind Redis's (which switched counters) can
// flush a new period's first units before its start: they go in its first
// hour, never in an hour before the period.
//
// A negative sum (units given back) cannot travel in the proposed row
// (used >= 0 is checked before the conflict is seen), so the update reads
// it from g; CASE runs that lookup only for those rare rows, keeping the
// statement linear in the batch.
const flushRowsSQL = `
WITH c AS (
    SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::bigint[], $6::timestamptz[])
        AS c(batch_id, tenant_id, meter, period_start, quantity, period_end)
), f AS (
    INSERT INTO usage_flushes (batch_id, tenant_id, meter, period_start, quantity)
    SELECT batch_id, tenant_id, meter, period_start, quantity FROM c
    ORDER BY tenant_id, meter, period_start, batch_id
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING batch_id, tenant_id, meter, period_start, quantity
), g AS (
    SELECT f.tenant_id, f.meter, f.period_start, max(c.period_end) AS period_end, sum(f.quantity)::bigint AS quantity
    FROM f JOIN c USING (batch_id)
    GROUP BY f.tenant_id, f.meter, f.period_start
), per AS (
    INSERT INTO usage_periods AS up (tenant_id, meter, period_start, period_end, used)
    SELECT tenant_id, meter, period_start, period_end, greatest(quantity, 0) FROM g
    ORDER BY tenant_id, meter, period_start
    ON CONFLICT (tenant_id, meter, period_start) DO UPDATE SET
        used = CASE WHEN excluded.used > 0 THEN up.used + excluded.used
            ELSE greatest(up.used + (SELECT g.quantity FROM g WHERE g.tenant_id = excluded.tenant_id
                AND g.meter = excluded.meter AND g.period_start = excluded.period_start), 0) END,
        updated_at = now()
), hourly AS (
    INSERT INTO usage_hourly AS h (tenant_id, period_start, meter, hour, used)
    SELECT tenant_id, period_start, meter,
        greatest(date_trunc('hour', $7::timestamptz), date_trunc('hour', period_start)), greatest(quantity, 0) FROM g
    ORDER BY tenant_id, period_start, meter
    ON CONFLICT (tenant_id, period_start, meter, hour) DO UPDATE SET
        used = CASE WHEN excluded.used > 0 THEN h.used + excluded.used
            ELSE greatest(h.used + (SELECT g.quantity FROM g WHERE g.tenant_id = excluded.tenant_id
                AND g.meter = excluded.meter AND g.period_start = excluded.period_start), 0) END
)
SELECT count(*), coalesce(sum(quantity), 0)::bigint FROM f`

// flushRow is a claim ready for flushRowsSQL; i is its index in the
// caller's claims.
type flushRow struct {
	i   int
	c   FlushClaim
	end time.Time
}

// commitClaims commits claims to Postgres in one statement (plus one read
// of the tenants' periods), whatever their number: the caller bounds it.
// out[i] says what became of claims[i]. A claim of an unknown tenant or
// with a malformed name is dropped and logged. When the statement fails
// on a row (a tenant deleted since its periods were read), the batch is
// split in halves until the bad claim is alone, so the others still land
// and only the bad one is dropped; any other failure leaves every claim
// of the batch for the next pass and is returned.
func (s *Service) commitClaims(ctx context.Context, claims []FlushClaim) ([]commitOutcome, FlushStats, error) {
	out := make([]commitOutcome, len(claims))
	var st FlushStats
	var tenants []string
	for i, c := range claims {
		if !ids.IsUUID(c.Tenant) || !ValidMeter(c.Meter) {
			s.drop(ctx, c, "malformed tenant or meter", &st)
			out[i] = commitDropped
			continue
		}
		tenants = append(tenants, c.Tenant)
	}
	if len(tenants) == 0 {
		return out, st, nil
	}
	periods, err := loadTenantsPeriods(ctx, s.db, tenants)
	if err != nil {
		return out, st, err
	}
	rows := make([]flushRow, 0, len(tenants))
	for i, c := range claims {
		if out[i] == commitDropped {
			continue
		}
		tp, ok := periods[strings.ToLower(c.Tenant)]
		if !ok {
			s.drop(ctx, c, "unknown tenant", &st)
			out[i] = commitDropped
			continue
		}
		start := c.PeriodStart.UTC()
		c.PeriodStart = start
		rows = append(rows, flushRow{i: i, c: c, end: tp.endOf(start)})
	}
	err = s.commitRows(ctx, rows, out, &st)
	return out, st, err
}

// commitRows runs flushRowsSQL on rows, splitting them on a row error.
func (s *Service) commitRows(ctx context.Context, rows []flushRow, out []commitOutcome, st *FlushStats) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	batch, tenant, meter := make([]string, n), make([]string, n), make([]string, n)
	start, end := make([]time.Time, n), make([]time.Time, n)
	qty := make([]int64, n)
	for j, r := range rows {
		batch[j], tenant[j], meter[j] = r.c.ID, r.c.Tenant, r.c.Meter
		start[j], end[j], qty[j] = r.c.PeriodStart, r.end, r.c.N
	}
	var inserted, units int64
	err := s.db.QueryRow(ctx, flushRowsSQL, batch, tenant, meter, start, qty, end, s.opts.Now()).Scan(&inserted, &units)
	if err == nil {
		for _, r := range rows {
			out[r.i] = commitCommitted
		}
		st.Counters += n
		st.Units += units
		return nil
	}
	var pe *pgconn.PgError
	rowError := errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "23") || strings.HasPrefix(pe.Code, "22"))
	if !rowError || ctx.Err() != nil {
		return fmt.Errorf("committing %d claims: %w", n, err)
	}
	if n == 1 {
		if pe.Code == "23503" { // foreign key: the tenant was deleted meanwhile
			s.drop(ctx, rows[0].c, "unknown tenant", st)
			out[rows[0].i] = commitDropped
			return nil
		}
		// Any other row error is ours to fix, not the tenant's: keep the
		// claim (it is retried every pass) and say so.
		return fmt.Errorf("committing claim %s: %w", rows[0].c.ID, err)
	}
	s.log.WarnContext(ctx, "flush batch refused, splitting it", "claims", n, "err", err)
	return errors.Join(s.commitRows(ctx, rows[:n/2], out, st), s.commitRows(ctx, rows[n/2:], out, st))
}

// drop logs a claim that can never be committed. Usage of a tenant we do
// not have (deleted, or a key no tenant of ours made) would otherwise be
// retried every pass forever.
func (s *Service) drop(ctx context.Context, c FlushClaim, reason string, st *FlushStats) {
	s.log.WarnContext(ctx, "dropping pending usage", "tenant_id", c.Tenant, "meter", c.Meter, "units", c.N, "claim", c.ID, "reason", reason)
	st.Dropped++
}

// loadTenantsPeriods is loadTenantPeriods for many tenants in one query,
// keyed by lower-case tenant id; a tenant that does not exist is absent.
func loadTenantsPeriods(ctx context.Context, q postgres.Querier, tenants []string) (map[string]tenantPeriods, error) {
	uniq := slices.Clone(tenants)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	rows, err := q.Query(ctx, `
SELECT t.id::text, t.period_anchor, s.current_period_start, s.current_period_end, p.quota_window
FROM unnest($1::uuid[]) u(id)
JOIN tenants t ON t.id = u.id
JOIN plans p ON p.key = t.plan_key
LEFT JOIN LATERAL (`+entitlements.CurrentSubscriptionOf("t.id")+`) s ON true`, uniq)
	if err != nil {
		return nil, fmt.Errorf("metering: tenant periods: %w", err)
	}
	defer rows.Close()
	out := make(map[string]tenantPeriods, len(uniq))
	for rows.Next() {
		var id string
		var tp tenantPeriods
		var start, end *time.Time
		if err := rows.Scan(&id, &tp.anchor, &start, &end, &tp.window); err != nil {
			return nil, fmt.Errorf("metering: tenant periods: %w", err)
		}
		if start != nil && end != nil {
			tp.sub = &period.Period{Start: start.UTC(), End: end.UTC()}
		}
		out[id] = tp
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("metering: tenant periods: %w", err)
	}
	return out, nil
}
