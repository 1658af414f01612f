package credits

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/period"
	"github.com/tollgatehq/tollgate/limiter"
)

// RolloverPriority is the priority of rollover grants: drawn before the
// default (they expire soonest).
const RolloverPriority = 10

// ClosedPeriod is a usage window the worker closed, with its closing
// figure (metering's, converted by cmd).
type ClosedPeriod struct {
	TenantID string
	Meter    string
	Start    time.Time
	End      time.Time
	Used     int64
}

// RolloverTx makes, in the close's transaction, the rollover grants of
// windows just closed: for a quota whose plan sets "rollover", the included
// units left unused (the tenant's included quota, overrides, add-ons and
// seats counted, less the closing figure), at most rollover.max, become a
// grant effective from the window's end and expiring at the end of the
// expires_after_periods-th window after it. Once per window: the grant's
// source_ref names the tenant, meter and window start. It returns how many
// grants it made.
//
// The included quota and the plan are the tenant's as they are at the
// close (a minute after the window ended), not as they were during it.
func (s *Service) RolloverTx(ctx context.Context, tx pgx.Tx, closed []ClosedPeriod) (int, error) {
	plans, err := s.cat.ListPlans(ctx)
	if err != nil {
		return 0, fmt.Errorf("credits: rollover: %w", err)
	}
	rolls := map[string]map[string]catalogue.Rollover{} // plan → meter → rollover
	meters := map[string]bool{}
	for _, p := range plans {
		for m, q := range p.Quotas {
			if q.Rollover == nil {
				continue
			}
			if rolls[p.Key] == nil {
				rolls[p.Key] = map[string]catalogue.Rollover{}
			}
			rolls[p.Key][m] = *q.Rollover
			meters[m] = true
		}
	}
	if len(meters) == 0 {
		return 0, nil // no plan rolls anything over: the close costs nothing more
	}
	snaps := map[string]limiter.Snapshot{}
	made := 0
	for _, c := range closed {
		if !meters[c.Meter] {
			continue
		}
		snap, ok := snaps[c.TenantID]
		if !ok {
			snap, err = s.ents.SnapshotFromPostgres(ctx, c.TenantID)
			if err != nil {
				return made, fmt.Errorf("credits: rollover of tenant %s: %w", c.TenantID, err)
			}
			snaps[c.TenantID] = snap
		}
		r, ok := rolls[snap.Plan][c.Meter]
		if !ok {
			continue
		}
		q, ok := snap.Quotas[c.Meter]
		if !ok {
			continue // unlimited: nothing is "left"
		}
		n := min(max(q.Limit-c.Used, 0), r.Max)
		if n <= 0 {
			continue
		}
		exp := rolloverExpiry(c, snap, r.ExpiresAfterPeriods)
		_, created, err := s.createTx(ctx, tx, NewGrant{TenantID: c.TenantID, Meter: c.Meter, Amount: n, Priority: RolloverPriority,
			EffectiveAt: c.End, ExpiresAt: &exp, Source: SourceRollover,
			SourceRef: fmt.Sprintf("%s:%s:%d", c.TenantID, c.Meter, c.Start.Unix()),
			Reason:    fmt.Sprintf("rollover of %d unused %s from the window %s – %s", n, c.Meter, c.Start.UTC().Format(time.RFC3339), c.End.UTC().Format(time.RFC3339))})
		if err != nil {
			return made, err
		}
		if created {
			made++
		}
	}
	if made > 0 {
		s.log.InfoContext(ctx, "rollover grants made", "count", made)
	}
	return made, nil
}

// rolloverExpiry is the end of the n-th window after the closed one: the
// snapshot's own windows when the closed one is the one before its
// current window (the usual case, a minute after the end), monthly steps
// on the current window's start beyond them or otherwise.
func rolloverExpiry(c ClosedPeriod, snap limiter.Snapshot, n int) time.Time {
	n = max(n, 1)
	var ends []time.Time
	p := period.Period{Start: c.Start, End: c.End}
	anchor := c.Start
	if snap.PeriodStart.Equal(c.End) {
		ends = append(ends, snap.PeriodEnd)
		p, anchor = period.Period{Start: snap.PeriodStart, End: snap.PeriodEnd}, snap.PeriodStart
		if !snap.NextPeriodEnd.IsZero() {
			ends = append(ends, snap.NextPeriodEnd)
			p = period.Period{Start: snap.PeriodEnd, End: snap.NextPeriodEnd}
		}
	}
	for len(ends) < n {
		p = period.Next(anchor, p)
		ends = append(ends, p.End)
	}
	return ends[n-1]
}
