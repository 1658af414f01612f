package metering

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/ids"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/limiter"
)

// MeterUsage is one meter of GET /v1/usage. Limit, Remaining and Mode are
// nil/empty for a meter without a quota (usage events of an unlimited meter).
type MeterUsage struct {
	Meter     string `json:"meter"`
	Used      int64  `json:"used"`
	Limit     *int64 `json:"limit"`
	Remaining *int64 `json:"remaining"`
	Mode      string `json:"mode,omitempty"`
	// Overage is how far used is over a soft quota's limit (what it bills
	// extra); 0 for hard quotas, whose excess (only possible through usage
	// events) shows as used > limit.
	Overage int64 `json:"overage"`
	// Included is the quota's included units (Limit: the plan's with
	// overrides, add-ons and seats); Grants the meter's active grants,
	// in draw order, with what Redis holds of them; Available what
	// requests can still take: the unused included units plus every
	// active grant's remaining. Set for a meter with a quota when
	// Options.Grants is (Used counts units from included and grants).
	Included  *int64       `json:"included,omitempty"`
	Grants    []UsageGrant `json:"grants,omitempty"`
	Available *int64       `json:"available,omitempty"`
	// Source says which side Used came from: SourceRedis (the live
	// counter) or SourcePostgres (the durable figure). The admin API shows
	// it; GET /v1/usage does not.
	Source string `json:"-"`
}

// UsageGrant is one active grant of a meter in GET /v1/usage.
type UsageGrant struct {
	ID        string     `json:"id"`
	Remaining int64      `json:"remaining"`
	ExpiresAt *time.Time `json:"expires_at"`
	Source    string     `json:"source"`
}

// GrantsFunc returns a tenant's active grants of a meter in draw order,
// with the ledger's remaining (cmd wires credits' Balance).
type GrantsFunc func(ctx context.Context, tenantID, meter string) ([]UsageGrant, error)

// Where a used figure came from (see Used).
const (
	SourceRedis    = "redis"
	SourcePostgres = "postgres"
)

// Used is the one definition of "used" in a period, given the durable
// figure (usage_periods) and the live Redis counter (liveOK false when
// there is none). Every reader (GET /v1/usage, the dashboard, the console
// and the admin API) gets its figures from Usage, which applies this.
//
// It is the larger of the two. Each is a lower bound of the truth and
// neither includes all of the other: Redis holds limiter-counted usage not
// flushed yet (Postgres is behind by up to a flush interval), while
// Postgres holds usage events whose Redis increment was skipped (no
// counter, or Redis down) or a period whose counter was lost. Adding them
// would count flushed usage twice; the max is exact whenever one side is
// complete, and never under-reports. A tie counts as Redis: the live
// counter agrees with what was flushed.
func Used(durable, live int64, liveOK bool) (used int64, source string) {
	if liveOK && live >= durable {
		return max(live, 0), SourceRedis
	}
	return durable, SourcePostgres
}

// Usage is the tenant's usage in its current period.
type Usage struct {
	Period period.Period `json:"period"`
	Meters []MeterUsage  `json:"meters"`
	// Stale is true when Redis did not answer in time (or failed): Used
	// is then Postgres's durable figure, behind by what the limiter
	// counted since the last flush (FLUSH_INTERVAL). StaleReason says why
	// in a few words.
	Stale       bool   `json:"stale"`
	StaleReason string `json:"stale_reason,omitempty"`
}

// StaleReason of a Usage whose live counters could not be read.
const staleRedis = "live counters unavailable (Redis did not answer in time); figures are Postgres's, up to one flush interval behind"

// currentPeriod is the snapshot's period, or the next one once the
// snapshot's has ended (the limiter rolls the same way without waiting for
// a new snapshot).
func currentPeriod(snap limiter.Snapshot, now time.Time) period.Period {
	p := period.Period{Start: secondOf(snap.PeriodStart), End: secondOf(snap.PeriodEnd)}
	if !now.Before(p.End) && !p.End.IsZero() {
		next := snap.NextPeriodEnd
		if !next.After(p.End) {
			next = p.End.Add(p.End.Sub(p.Start))
		}
		p = period.Period{Start: p.End, End: secondOf(next)}
	}
	return p
}

// Usage returns the tenant's usage of every meter with a quota or with
// usage in the current period. Reading never consumes quota.
func (s *Service) Usage(ctx context.Context, tenantID string) (Usage, error) {
	if s.opts.Snapshot == nil {
		return Usage{}, errors.New("metering: usage: no snapshot function configured")
	}
	snap, err := s.opts.Snapshot(ctx, tenantID)
	if err != nil {
		return Usage{}, err
	}
	p := currentPeriod(snap, s.opts.Now())
	durable := map[string]int64{}
	rows, err := s.db.Query(ctx, `SELECT meter, used FROM usage_periods WHERE tenant_id = $1 AND period_start = $2`, tenantID, p.Start)
	if err != nil {
		return Usage{}, fmt.Errorf("metering: usage: %w", err)
	}
	for rows.Next() {
		var m string
		var n int64
		if err := rows.Scan(&m, &n); err != nil {
			rows.Close()
			return Usage{}, fmt.Errorf("metering: usage: %w", err)
		}
		durable[m] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Usage{}, fmt.Errorf("metering: usage: %w", err)
	}
	names := make([]string, 0, len(snap.Quotas)+len(durable))
	for m := range snap.Quotas {
		names = append(names, m)
	}
	for m := range durable {
		if _, ok := snap.Quotas[m]; !ok {
			names = append(names, m)
		}
	}
	sort.Strings(names)
	out := Usage{Period: p, Meters: make([]MeterUsage, 0, len(names))}
	// One deadline for every live read: a Redis that does not answer costs
	// this request RedisTimeout once, not once per meter (nor go-redis's
	// read timeout times its retries, seconds), and after the first failure
	// the remaining meters do not ask.
	rctx, cancel := context.WithTimeout(ctx, s.opts.RedisTimeout)
	defer cancel()
	for _, m := range names {
		var live int64
		ok := false
		if !out.Stale {
			var err error
			live, ok, err = s.store.Used(rctx, tenantID, m, p.Start)
			if err != nil {
				// The durable figure is still right up to the last flush.
				s.log.WarnContext(ctx, "reading redis usage failed; answering postgres figures", "tenant_id", tenantID, "meter", m, "err", err)
				out.Stale, out.StaleReason, ok = true, staleRedis, false
			}
		}
		used, source := Used(durable[m], live, ok)
		mu := MeterUsage{Meter: m, Used: used, Source: source}
		if q, ok := snap.Quotas[m]; ok {
			limit, rem := q.Limit, max(q.Limit-used, 0)
			mu.Limit, mu.Remaining = &limit, &rem
			mu.Mode = string(q.Mode)
			if mu.Mode == "" {
				mu.Mode = string(limiter.ModeHard)
			}
			if mu.Mode == string(limiter.ModeSoft) {
				mu.Overage = max(used-q.Limit, 0)
				if mu.Overage > 0 && s.opts.Prepaid != nil {
					// What prepaid grants covered is not billed (the Stripe
					// report takes it off the same way); their draws reach
					// Postgres with the flush, so this trails by one.
					prepaid, err := s.opts.Prepaid(ctx, tenantID, m, p.Start)
					if err != nil {
						return Usage{}, fmt.Errorf("metering: usage: %w", err)
					}
					mu.Overage = max(mu.Overage-prepaid, 0)
				}
			}
			if s.opts.Grants != nil {
				if err := s.usageGrants(ctx, rctx, tenantID, &mu, &out); err != nil {
					return Usage{}, err
				}
			}
		}
		out.Meters = append(out.Meters, mu)
	}
	return out, nil
}

// usageGrants fills mu's included, grants and available: the ledger's
// active grants, each with Redis's remaining when Redis has it (ahead of
// the ledger by the draws not flushed yet), and, when Redis does not
// answer, the ledger's (the answer is stale then anyway).
func (s *Service) usageGrants(ctx, rctx context.Context, tenantID string, mu *MeterUsage, out *Usage) error {
	gs, err := s.opts.Grants(ctx, tenantID, mu.Meter)
	if err != nil {
		return fmt.Errorf("metering: usage: grants: %w", err)
	}
	if len(gs) > 0 && !out.Stale {
		live, err := s.store.Grants(rctx, tenantID, mu.Meter)
		if err != nil {
			s.log.WarnContext(ctx, "reading redis grants failed; answering the ledger's", "tenant_id", tenantID, "meter", mu.Meter, "err", err)
			out.Stale, out.StaleReason = true, staleRedis
		}
		for i := range gs {
			if n, ok := live[gs[i].ID]; ok {
				gs[i].Remaining = n
			}
		}
	}
	avail := *mu.Remaining
	for _, g := range gs {
		avail += g.Remaining
	}
	included := *mu.Limit
	mu.Included, mu.Grants, mu.Available = &included, gs, &avail
	if mu.Grants == nil {
		mu.Grants = []UsageGrant{}
	}
	return nil
}

// LoadUsage is the limiter's UsageLoader: the durable usage of a meter in
// the period starting at periodStart (flushed limiter usage plus usage
// events), from which a counter missing from Redis is rebuilt.
func (s *Service) LoadUsage(ctx context.Context, tenant, meter string, periodStart time.Time) (int64, error) {
	if !ids.IsUUID(tenant) {
		return 0, nil // not a tenant of ours (explicit limits): nothing durable
	}
	var n int64
	err := s.db.QueryRow(ctx, `SELECT used FROM usage_periods WHERE tenant_id = $1 AND meter = $2 AND period_start = $3`,
		tenant, meter, secondOf(periodStart)).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("metering: load usage: %w", err)
	}
	return n, nil
}
