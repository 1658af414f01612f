package metering

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Crossing is a tenant's usage of a meter passing a threshold of its quota
// in the current window, found by the flush that committed the usage.
type Crossing struct {
	Tenant      string
	Meter       string
	Percent     int   // the threshold, a percentage of Limit
	Used        int64 // durable usage after the flush
	Limit       int64
	WindowStart time.Time
	WindowEnd   time.Time
}

// DedupeKey names the crossing once per tenant, meter, window, threshold
// and limit: a second flusher, a replay or usage hovering at the line find
// the same key; a new window re-arms it, and so does a changed limit.
func (c Crossing) DedupeKey() string {
	return fmt.Sprintf("quota.threshold/%s/%s/%d/%d%%/%d", strings.ToLower(c.Tenant), c.Meter, c.WindowStart.Unix(), c.Percent, c.Limit)
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
	var out []Crossing
	for tenant, keys := range byTenant {
		snap, err := s.opts.Limits(ctx, tenant)
		if err != nil {
			return fmt.Errorf("metering: crossings: snapshot of %s: %w", tenant, err)
		}
		for _, k := range keys {
			m := counters[k]
			q, ok := snap.Quotas[k.meter]
			if !ok || q.Limit <= 0 || !snap.PeriodStart.Equal(m.start) {
				continue // no quota, or a window that is not the current one
			}
			before := m.after - m.delta
			for _, p := range s.opts.Thresholds {
				line := (q.Limit*int64(p) + 99) / 100 // the first figure at or over p%
				if before < line && m.after >= line {
					out = append(out, Crossing{Tenant: tenant, Meter: k.meter, Percent: p, Used: m.after, Limit: q.Limit,
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
