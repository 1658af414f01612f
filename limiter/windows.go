package limiter

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// windowJSON is a Window as a snapshot carries it: its length in
// milliseconds (a time.Duration would be nanoseconds, which no other
// language's reader expects).
type windowJSON struct {
	Name     string     `json:"name"`
	Limit    int64      `json:"limit"`
	LengthMs int64      `json:"length_ms"`
	Kind     WindowKind `json:"kind,omitempty"`
}

// MarshalJSON writes the window with length_ms.
func (w Window) MarshalJSON() ([]byte, error) {
	return json.Marshal(windowJSON{Name: w.Name, Limit: w.Limit, LengthMs: w.Length.Milliseconds(), Kind: w.Kind})
}

// UnmarshalJSON reads the window with length_ms.
func (w *Window) UnmarshalJSON(b []byte) error {
	var j windowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = Window{Name: j.Name, Limit: j.Limit, Length: time.Duration(j.LengthMs) * time.Millisecond, Kind: j.Kind}
	return nil
}

// fixed says whether the window counts in fixed windows.
func (w *Window) fixed() bool { return w.Kind == WindowFixed }

// windowTyp is the policy type of a window in the decision script: 'w'
// sliding, 'f' fixed.
func windowTyp(w *Window) byte {
	if w.fixed() {
		return 'f'
	}
	return 'w'
}

// preparedWindow is a plan window with its key and script arguments.
type preparedWindow struct {
	w      Window
	typ    byte
	key    string
	limitS string
	lenS   string // length, ms
}

// planWindow is the key of a plan window's counter (keyspace.Keys.PlanWindow).
func (k keyNames) planWindow(tenant string, w *Window) string {
	return k.ks.PlanWindow(tenant, w.Name, w.Length, w.fixed())
}

// explicitWindow is the key of an explicit Limits' window: the sliding
// window's key as it always was, keyspace's FixedWindow for a fixed one.
func (k keyNames) explicitWindow(tenant string, w *Window) string {
	if w.fixed() {
		return k.ks.FixedWindow(tenant, w.Name, w.Length)
	}
	return k.window(tenant, w.Name, w.Length)
}

func (k keyNames) prepareWindows(tenant string, ws []Window) []preparedWindow {
	if len(ws) == 0 {
		return nil
	}
	out := make([]preparedWindow, 0, len(ws))
	for i := range ws {
		w := ws[i]
		if w.Length < time.Millisecond || !validName(w.Name, false) {
			continue // not a window the script can count (a bad snapshot)
		}
		out = append(out, preparedWindow{w: w, typ: windowTyp(&w), key: k.planWindow(tenant, &w),
			limitS: strconv.FormatInt(w.Limit, 10), lenS: strconv.FormatInt(w.Length.Milliseconds(), 10)})
	}
	return out
}

// policy returns the window's policy in a plan.
func (pw *preparedWindow) policy(fail FailMode) policy {
	return policy{typ: pw.typ, name: pw.w.Name, limit: pw.w.Limit, window: pw.w.Length, a: pw.limitS, b: pw.lenS, keys: []string{pw.key}, fail: fail}
}

// windowsField is the limits hash's w field of a plan's windows (see
// refGeneral): "<type> <name> <limit> <length ms>" each, space separated.
// A window's name has no space (validName).
func windowsField(ws []preparedWindow) string {
	var b strings.Builder
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte(w.typ)
		b.WriteByte(' ')
		b.WriteString(w.w.Name)
		b.WriteByte(' ')
		b.WriteString(w.limitS)
		b.WriteByte(' ')
		b.WriteString(w.lenS)
	}
	return b.String()
}

// parseWindowsField reads a limits hash's w field back ("" none).
func parseWindowsField(s string) ([]Window, error) {
	if s == "" {
		return nil, nil
	}
	t := strings.Fields(s)
	if len(t)%4 != 0 {
		return nil, fmt.Errorf("limiter: windows field of %d words", len(t))
	}
	ws := make([]Window, 0, len(t)/4)
	for i := 0; i < len(t); i += 4 {
		lim, e1 := strconv.ParseInt(t[i+2], 10, 64)
		ms, e2 := strconv.ParseInt(t[i+3], 10, 64)
		if e1 != nil || e2 != nil || (t[i] != "w" && t[i] != "f") {
			return nil, fmt.Errorf("limiter: windows field %q", s)
		}
		w := Window{Name: t[i+1], Limit: lim, Length: time.Duration(ms) * time.Millisecond, Kind: WindowSliding}
		if t[i] == "f" {
			w.Kind = WindowFixed
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// IsWindow says whether the policy is a window limit (a plan's, or one of
// explicit Limits): neither the rate, a quota (which has a mode) nor the
// concurrency limit (which has a unit). Its Window is the window's length.
func (p *PolicyStatus) IsWindow() bool {
	return p.Name != PolicyRate && p.Mode == "" && p.Unit == "" && p.Window > 0
}

// windowsEnd is when the first of the plan's windows' current (fixed)
// windows ends, by a take's answer; zero for a plan without windows. A
// prefetched unit was counted in Redis in the window the take ran in; used
// after that window ends it would be admitted in the next one, which never
// counted it (a fixed window would then admit more than its limit), so no
// lease lives past this.
func windowsEnd(pl *plan, d *Decision, now time.Time) time.Time {
	var end time.Time
	for i := range pl.pol {
		if t := pl.pol[i].typ; (t != 'w' && t != 'f') || i >= len(d.Policies) {
			continue
		}
		e := now.Add(d.Policies[i].Reset)
		if end.IsZero() || e.Before(end) {
			end = e
		}
	}
	return end
}

// capUntil is t, or until when that is earlier (a zero until caps nothing).
func capUntil(t, until time.Time) time.Time {
	if !until.IsZero() && until.Before(t) {
		return until
	}
	return t
}
