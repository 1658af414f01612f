package web

import (
	"context"
	"html/template"
	"strconv"
	"time"

	"github.com/tollgatehq/tollgate/internal/numfmt"
)

// WindowView is one of the plan's windows on the dashboard: what it has
// counted in the current window by the limiter's clock (Redis's), out of
// its limit, and when that window ends.
type WindowView struct {
	Name    string
	Kind    string
	Length  string
	Used    int64
	Limit   int64
	Left    int64
	Pct     int // 0-100, for the bar
	PctText string
	ResetIn string
	Full    bool // no unit left in this window
	Bar     template.HTML
}

// windowViews reads the snapshot's windows' live counters. A Redis that
// does not answer in time leaves them out and marks the page stale: the
// windows have no durable figure to fall back on.
func (w *Web) windowViews(ctx context.Context, v *UsageView) {
	if len(v.Snap.Windows) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, w.RedisTimeout)
	defer cancel()
	uses, err := w.Limits.WindowUsage(rctx, v.Tenant.ID, v.Snap.Windows)
	if err != nil {
		v.Stale = true
		w.log.WarnContext(ctx, "reading live windows failed", "tenant_id", v.Tenant.ID, "err", err)
		return
	}
	for _, u := range uses {
		wv := WindowView{Name: u.Window.Name, Kind: string(u.Window.Kind), Length: lengthText(u.Window.Length),
			Used: min(u.Used, u.Window.Limit), Limit: u.Window.Limit, ResetIn: fmtDuration(u.Reset.Round(time.Second))}
		if wv.Kind == "" {
			wv.Kind = "sliding"
		}
		wv.Left = wv.Limit - wv.Used
		wv.Full = wv.Left <= 0
		if wv.Limit > 0 {
			wv.Pct = int(wv.Used * 100 / wv.Limit)
		}
		wv.PctText = strconv.Itoa(wv.Pct) + "%"
		wv.Bar = meterBar(float64(wv.Pct), wv.Full)
		v.Windows = append(v.Windows, wv)
	}
}

// lengthText is a window's length as the plan form takes it ("1h", "90s").
func lengthText(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return numfmt.Int(int64(d/time.Hour)) + "h"
	case d%time.Minute == 0:
		return numfmt.Int(int64(d/time.Minute)) + "m"
	}
	return d.String()
}
