package metering

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/limitstore"
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
	// Seq is the counter's flush sequence as Redis last acknowledged it
	// (limitstore.Claim.Seq; 0 unknown). Behind Postgres's, the claim
	// comes from a rolled-back hash and is not counted.
	Seq int64
	// Grants are what each grant of the meter gave in the claim
	// (recorded through Options.GrantDraws).
	Grants []limitstore.GrantDraw
}

// Commit outcomes of one claim: only a failed claim must stay in Redis.
type commitOutcome uint8

const (
	commitFailed    commitOutcome = iota // not committed: keep the claim for the next pass
	commitCommitted                      // in Postgres now, or found there (a replay)
	commitDropped                        // can never be committed (unknown tenant): drop it
	commitStale                          // from a hash behind Postgres (a rollback): not counted, rebase the counter
)

// commitResult is what Postgres said of one claim: what the
// acknowledgement writes back into the counter.
type commitResult struct {
	seq     int64 // the counter's flush sequence after the commit, 0 unknown
	durable int64 // the counter's durable usage (for a stale claim's rebase)
}

// flushRowsSQL commits many claims in one statement, so one round trip
// and one implicit transaction. Only claims whose id is new in
// usage_flushes add to the durable meter and the hourly history, summed
// per row they touch (two claims of one counter in a batch would
// otherwise update one row twice, which Postgres refuses). Rows are
// inserted in key order so that concurrent flushers lock them in the
// same order and cannot deadlock.
//
// Each counted claim numbers the counter's flushes (usage_periods.
// flush_seq, and usage_flushes.seq the number it got); Redis keeps the
// number its last acknowledgement saw (the claim's base, $8, 0 when
// unknown). A claim whose base is behind the counter's number, or the
// replay of a claim after which others were counted, comes from a hash
// older than what Postgres has: a replica promoted after losing writes.
// Its units were the old master's and are counted already: it is
// recorded uncounted (so that a replay is not counted either) and
// answered stale, with the durable usage to rebase the counter on.
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
//
// It returns one row per claim: its id, whether it is stale, and the
// counter's flush sequence and durable usage after the statement.
const flushRowsSQL = `
WITH c AS (
    SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::bigint[], $6::timestamptz[], $8::bigint[])
        AS c(batch_id, tenant_id, meter, period_start, quantity, period_end, base)
), cur AS (
    SELECT c.batch_id, coalesce(up.used, 0) AS used, coalesce(up.flush_seq, 0) AS flush_seq,
        (c.base > 0 AND c.base < coalesce(up.flush_seq, 0)) AS stale
    FROM c LEFT JOIN usage_periods up USING (tenant_id, meter, period_start)
), f AS (
    INSERT INTO usage_flushes (batch_id, tenant_id, meter, period_start, quantity, counted, seq)
    SELECT c.batch_id, c.tenant_id, c.meter, c.period_start, c.quantity, NOT cur.stale,
        CASE WHEN cur.stale THEN NULL ELSE cur.flush_seq + 1 END
    FROM c JOIN cur USING (batch_id)
    ORDER BY c.tenant_id, c.meter, c.period_start, c.batch_id
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING batch_id, tenant_id, meter, period_start, quantity, counted
), g AS (
    SELECT f.tenant_id, f.meter, f.period_start, max(c.period_end) AS period_end, sum(f.quantity)::bigint AS quantity,
        count(*)::bigint AS n
    FROM f JOIN c USING (batch_id)
    WHERE f.counted
    GROUP BY f.tenant_id, f.meter, f.period_start
), per AS (
    INSERT INTO usage_periods AS up (tenant_id, meter, period_start, period_end, used, flush_seq)
    SELECT tenant_id, meter, period_start, period_end, greatest(quantity, 0), n FROM g
    ORDER BY tenant_id, meter, period_start
    ON CONFLICT (tenant_id, meter, period_start) DO UPDATE SET
        used = CASE WHEN excluded.used > 0 THEN up.used + excluded.used
            ELSE greatest(up.used + (SELECT g.quantity FROM g WHERE g.tenant_id = excluded.tenant_id
                AND g.meter = excluded.meter AND g.period_start = excluded.period_start), 0) END,
        flush_seq = up.flush_seq + excluded.flush_seq,
        updated_at = now()
    RETURNING tenant_id, meter, period_start, used, flush_seq
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
SELECT c.batch_id,
    CASE WHEN f.batch_id IS NOT NULL THEN NOT f.counted
        ELSE (old.counted IS FALSE OR old.seq < cur.flush_seq) END,
    coalesce(per.flush_seq, cur.flush_seq), coalesce(per.used, cur.used),
    f.batch_id IS NOT NULL AND f.counted, coalesce(f.quantity, 0)
FROM c JOIN cur USING (batch_id)
LEFT JOIN f USING (batch_id)
LEFT JOIN usage_flushes old ON old.batch_id = c.batch_id
LEFT JOIN per ON per.tenant_id = c.tenant_id AND per.meter = c.meter AND per.period_start = c.period_start`

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
	out, _, st, err := s.commitClaimsResults(ctx, claims)
	return out, st, err
}

// commitClaimsResults is commitClaims with what Postgres said of each
// claim (res[i] for claims[i]; seq 0 unless committed or stale).
func (s *Service) commitClaimsResults(ctx context.Context, claims []FlushClaim) ([]commitOutcome, []commitResult, FlushStats, error) {
	out := make([]commitOutcome, len(claims))
	res := make([]commitResult, len(claims))
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
		return out, res, st, nil
	}
	periods, err := loadTenantsPeriods(ctx, s.db, tenants)
	if err != nil {
		return out, res, st, err
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
	err = s.commitRows(ctx, rows, out, res, &st)
	return out, res, st, err
}

// commitRows runs flushRowsSQL on rows, splitting them on a row error.
func (s *Service) commitRows(ctx context.Context, rows []flushRow, out []commitOutcome, res []commitResult, st *FlushStats) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	batch, tenant, meter := make([]string, n), make([]string, n), make([]string, n)
	start, end := make([]time.Time, n), make([]time.Time, n)
	qty, base := make([]int64, n), make([]int64, n)
	at := make(map[string]int, n)
	for j, r := range rows {
		batch[j], tenant[j], meter[j] = r.c.ID, r.c.Tenant, r.c.Meter
		start[j], end[j], qty[j], base[j] = r.c.PeriodStart, r.end, r.c.N, r.c.Seq
		at[r.c.ID] = j
	}
	err := s.commitStatement(ctx, rows, at, []any{batch, tenant, meter, start, qty, end, s.opts.Now(), base}, out, res, st)
	if err == nil {
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
	return errors.Join(s.commitRows(ctx, rows[:n/2], out, res, st), s.commitRows(ctx, rows[n/2:], out, res, st))
}

// commitStatement runs flushRowsSQL and reads its row per claim into out
// and res. Nothing is written to out before the statement succeeded.
func (s *Service) commitStatement(ctx context.Context, rows []flushRow, at map[string]int, args []any, out []commitOutcome, res []commitResult, st *FlushStats) error {
	var q pgx.Rows
	var tx pgx.Tx
	var err error
	grants := false
	if s.opts.GrantDraws != nil {
		for _, r := range rows {
			grants = grants || len(r.c.Grants) > 0
		}
	}
	if grants || (s.opts.Crossings != nil && s.opts.Limits != nil) {
		// The crossings go to the outbox, and the grants' draws to the
		// ledger, in the transaction of the figures.
		if tx, err = s.db.Begin(ctx); err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		q, err = tx.Query(ctx, flushRowsSQL, args...)
	} else {
		q, err = s.db.Query(ctx, flushRowsSQL, args...)
	}
	if err != nil {
		return err
	}
	defer q.Close()
	counters := map[counterKey]*counterMove{}
	type row struct {
		j     int
		stale *bool // nil: another flusher committed this claim meanwhile
		r     commitResult
	}
	got := make([]row, 0, len(rows))
	var units int64
	stale := 0
	for q.Next() {
		var id string
		var x row
		var counted bool
		var n int64
		if err := q.Scan(&id, &x.stale, &x.r.seq, &x.r.durable, &counted, &n); err != nil {
			return err
		}
		j, ok := at[id]
		if !ok {
			return fmt.Errorf("metering: flush: a row for claim %q that was not sent", id)
		}
		x.j = j
		if counted {
			units += n
			c := rows[j].c
			k := counterKey{c.Tenant, c.Meter, c.PeriodStart.Unix()}
			m := counters[k]
			if m == nil {
				m = &counterMove{start: c.PeriodStart, end: rows[j].end}
				counters[k] = m
			}
			m.after, m.delta = x.r.durable, m.delta+n
		}
		got = append(got, x)
	}
	if err := q.Err(); err != nil {
		return err
	}
	if len(got) != len(rows) {
		return fmt.Errorf("metering: flush: %d rows for %d claims", len(got), len(rows))
	}
	if tx != nil {
		q.Close()
		if s.opts.Crossings != nil && s.opts.Limits != nil {
			if err := s.reportCrossings(ctx, tx, counters); err != nil {
				return err
			}
		}
		if grants {
			// Every claim committed now or before (a replay: the ledger
			// adds nothing for a flush id it has) records its draws; a
			// stale claim's were the old master's, and a claim another
			// flusher committed meanwhile is that flusher's to record.
			var draws []GrantDraw
			for _, x := range got {
				if x.stale == nil || *x.stale {
					continue
				}
				c := rows[x.j].c
				for _, g := range c.Grants {
					draws = append(draws, GrantDraw{FlushID: c.ID, GrantID: g.ID, PeriodStart: c.PeriodStart, Units: g.Units})
				}
			}
			if len(draws) > 0 {
				if err := s.opts.GrantDraws(ctx, tx, draws); err != nil {
					return fmt.Errorf("metering: flush: grant draws: %w", err)
				}
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	done := 0
	for _, x := range got {
		i := rows[x.j].i
		if x.stale == nil {
			// The claim's id was inserted by a concurrent flusher after
			// this statement's snapshot: its row is invisible here, so
			// whether it was counted (and the sequence to acknowledge) is
			// unknown. That flusher acknowledges it; left failed here, a
			// replay next pass finds it committed if it is still pending.
			continue
		}
		done++
		out[i], res[i] = commitCommitted, x.r
		if *x.stale {
			out[i] = commitStale
			stale++
		}
	}
	st.Counters += done
	st.Units += units
	st.Stale += stale
	return nil
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
SELECT tp.tenant_id::text, tp.period_anchor, tp.current_period_start, tp.current_period_end, tp.quota_window
FROM unnest($1::uuid[]) u(id)
JOIN tenant_accounts tp ON tp.tenant_id = u.id`, uniq)
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
