package metering

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClosedWindow is one tenant's quota window closed by ClosePeriods, with
// each meter's final figure.
type ClosedWindow struct {
	Tenant      string
	WindowStart time.Time
	WindowEnd   time.Time
	Meters      map[string]int64 // meter → used
}

// DedupeKey names the closing once per tenant and window.
func (c ClosedWindow) DedupeKey() string {
	return fmt.Sprintf("period.closed/%s/%d/%d", strings.ToLower(c.Tenant), c.WindowStart.Unix(), c.WindowEnd.Unix())
}

// PeriodsClosedFunc takes the windows ClosePeriods closed, inside its
// transaction.
type PeriodsClosedFunc func(ctx context.Context, tx pgx.Tx, ws []ClosedWindow) error

type closedRow struct {
	Tenant      string
	Meter       string
	PeriodStart time.Time
	PeriodEnd   time.Time
	Used        int64
}

// closedWindows groups closed meter rows by tenant and window, in a stable
// order.
func closedWindows(rows []closedRow) []ClosedWindow {
	type key struct {
		tenant     string
		start, end int64
	}
	idx := map[key]int{}
	var out []ClosedWindow
	for _, r := range rows {
		k := key{r.Tenant, r.PeriodStart.Unix(), r.PeriodEnd.Unix()}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, ClosedWindow{Tenant: r.Tenant, WindowStart: r.PeriodStart.UTC(), WindowEnd: r.PeriodEnd.UTC(), Meters: map[string]int64{}})
		}
		out[i].Meters[r.Meter] = r.Used
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DedupeKey() < out[j].DedupeKey() })
	return out
}
