package metering

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/tollgatehq/tollgate/limiter"
	"github.com/tollgatehq/tollgate/limiter/keyspace"
)

// Crossing is a tenant's usage of a meter passing a threshold of its quota
// in the current window, found by the flush that committed the usage.
type Crossing struct {
	Tenant      string
	Meter       string
	Percent     int   // the threshold, a percentage of Limit, or
	Units       int64 // the threshold in units (exactly one is set)
	Used        int64 // durable usage after the flush
	Limit       int64
	WindowStart time.Time
	WindowEnd   time.Time
}

// DedupeKey names the crossing once per tenant, meter, window, threshold
// and limit: a second flusher, a replay or usage hovering at the line find
// the same key; a new window re-arms it, and so does a changed limit.
func (c Crossing) DedupeKey() string {
	line := fmt.Sprintf("%d%%", c.Percent)
	if c.Units > 0 {
		line = fmt.Sprintf("%du", c.Units)
	}
	return fmt.Sprintf("quota.threshold/%s/%s/%d/%s/%d", strings.ToLower(c.Tenant), c.Meter, c.WindowStart.Unix(), line, c.Limit)
}

// CrossingsFunc takes crossings inside the flush's transaction tx.
type CrossingsFunc func(ctx context.Context, tx pgx.Tx, cs []Crossing) error

type counterKey struct {
	tenant, meter string
	start         int64
}

// counterMove is what one flush statement did to one durable counter.
type counterMove struct {
	start, end   time.Time
	delta, after int64 // units counted by this statement; durable usage after it
}

// reportCrossings finds the thresholds each counter passed in this
// statement (usage before it under the line, after it at or over) and
// hands them to Options.Crossings. Rows of a counter are locked by the
// statement until tx ends, so two flushers see disjoint before/after
// ranges and each crossing is found by one of them only; the outbox's key
// makes a replay harmless too.
func (s *Service) reportCrossings(ctx context.Context, tx pgx.Tx, counters map[counterKey]*counterMove) error {
	byTenant := map[string][]counterKey{}
	for k, m := range counters {
		if m.delta > 0 {
			byTenant[k.tenant] = append(byTenant[k.tenant], k)
		}
	}
	snaps, err := s.snapshotsOf(ctx, byTenant)
	if err != nil {
		return err
	}
	var out []Crossing
	for tenant, keys := range byTenant {
		snap := snaps[tenant]
		for _, k := range keys {
			m := counters[k]
			q, ok := snap.Quotas[k.meter]
			if !ok || q.Limit <= 0 || !snap.PeriodStart.Equal(m.start) {
				continue // no quota, or a window that is not the current one
			}
			before := m.after - m.delta
			for _, t := range s.thresholdsOf(snap, k.meter) {
				line := t.Units
				if t.Percent > 0 {
					line = (q.Limit*int64(t.Percent) + 99) / 100 // the first figure at or over p%
				}
				if before < line && m.after >= line {
					out = append(out, Crossing{Tenant: tenant, Meter: k.meter, Percent: t.Percent, Units: t.Units, Used: m.after, Limit: q.Limit,
						WindowStart: m.start, WindowEnd: m.end})
				}
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DedupeKey() < out[j].DedupeKey() })
	if err := s.opts.Crossings(ctx, tx, out); err != nil {
		return fmt.Errorf("metering: crossings: %w", err)
	}
	return nil
}

// snapshotFetches bounds the snapshot reads of one flush statement in
// flight at once. They run while the statement's rows stay locked, so one
// read after another made the pass with the hook about twice the pass
// without it (BenchmarkFlushPass); a handful at once hides most of the
// round trips without crowding the pool the decisions use.
const snapshotFetches = 16

// snapshotsOf reads the snapshot of each tenant whose counters moved.
func (s *Service) snapshotsOf(ctx context.Context, byTenant map[string][]counterKey) (map[string]limiter.Snapshot, error) {
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	snaps := make([]limiter.Snapshot, len(tenants))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(snapshotFetches)
	for i, tenant := range tenants {
		g.Go(func() error {
			snap, err := s.opts.Limits(gctx, tenant)
			if err != nil {
				return fmt.Errorf("metering: crossings: snapshot of %s: %w", tenant, err)
			}
			snaps[i] = snap
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string]limiter.Snapshot, len(tenants))
	for i, t := range tenants {
		out[t] = snaps[i]
	}
	return out, nil
}

// thresholdsOf are the meter's thresholds: the plan's or override's
// (Snapshot.Notify), else Options.Thresholds.
func (s *Service) thresholdsOf(snap limiter.Snapshot, meter string) []keyspace.QuotaThreshold {
	if ts := snap.Notify[meter]; len(ts) > 0 {
		return ts
	}
	out := make([]keyspace.QuotaThreshold, len(s.opts.Thresholds))
	for i, p := range s.opts.Thresholds {
		out[i] = keyspace.QuotaThreshold{Percent: p}
	}
	return out
}
