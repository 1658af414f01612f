package entitlements

import (
	"fmt"

	"github.com/tollgatehq/tollgate/internal/catalogue"
	"github.com/tollgatehq/tollgate/internal/numfmt"
	"github.com/tollgatehq/tollgate/limiter"
)

// A plan's windows ("5,000 an hour") go into the snapshot as they are
// stored, in the plan's order, and the limiter checks them next to the
// rate in the same decision. Quota overrides, add-ons and seats are about
// a meter's period quota and leave windows alone: an override raising a
// tenant's monthly requests does not raise its hourly window.

// WindowPolicy is the policy name of a plan window in an explanation:
// "window:<name>" (the limiter's decisions and headers name it <name>).
func WindowPolicy(name string) string { return "window:" + name }

// snapshotWindow is a stored plan window as the limiter takes it.
func snapshotWindow(w catalogue.PlanWindow) limiter.Window {
	kind := limiter.WindowKind(w.Kind)
	if kind == "" {
		kind = limiter.WindowSliding
	}
	return limiter.Window{Name: w.Name, Limit: w.Limit, Length: w.Duration(), Kind: kind}
}

func windowWhat(w catalogue.PlanWindow) string {
	kind := w.Kind
	if kind == "" {
		kind = catalogue.WindowSliding
	}
	return fmt.Sprintf("%s per %s, %s", numfmt.Int(w.Limit), w.Length, kind)
}

// planWindows returns the snapshot's windows of a plan, telling why.
func planWindows(ws []catalogue.PlanWindow, why *explainer) []limiter.Window {
	if len(ws) == 0 {
		return nil
	}
	out := make([]limiter.Window, 0, len(ws))
	for _, w := range ws {
		if w.Duration() <= 0 {
			continue // never stored: validation refuses it
		}
		out = append(out, snapshotWindow(w))
		l := w.Limit
		why.plan(WindowPolicy(w.Name), windowWhat(w), &l)
	}
	return out
}

// keepOwnWindows runs after a fallback, as keepOwnLimits does for the
// rate: a window of the tenant's own plan that the default plan does not
// name stays, so that a tenant whose subscription ended never gets more
// than it had while paying.
func keepOwnWindows(snap *limiter.Snapshot, own catalogue.Plan, why *explainer) {
	for _, w := range own.Windows {
		named := false
		for _, s := range snap.Windows {
			named = named || s.Name == w.Name
		}
		if named || w.Duration() <= 0 {
			continue
		}
		snap.Windows = append(snap.Windows, snapshotWindow(w))
		l := w.Limit
		why.kept(WindowPolicy(w.Name), own, windowWhat(w), &l)
	}
}

// windowLimits are the explanation's limits of the snapshot's windows, in
// its order.
func (e *explainer) windowLimits(snap limiter.Snapshot) []Limit {
	out := make([]Limit, 0, len(snap.Windows))
	for _, w := range snap.Windows {
		l := e.limit(WindowPolicy(w.Name), "")
		n := w.Limit
		l.Limit, l.Unlimited = &n, false
		l.Window, l.Length, l.Kind = w.Name, catalogue.WindowLength(w.Length.String()), string(w.Kind)
		out = append(out, l)
	}
	return out
}
